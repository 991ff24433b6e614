//! `resources/list`, `resources/templates/list`, `resources/read`,
//! `resources/subscribe` and `resources/unsubscribe`, relayed to the
//! upstream that owns each URI.

use std::sync::Arc;

use rmcp::ErrorData as McpError;
use rmcp::model::{
    ClientRequest, ListResourceTemplatesRequest, ListResourceTemplatesResult, ListResourcesRequest,
    ListResourcesResult, PaginatedRequestParams, ReadResourceRequest, ReadResourceRequestParams,
    ReadResourceResponse, ReadResourceResult, ResourceContents, ServerCapabilities,
};
use rmcp::{Peer, RoleServer};
use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use toolexec::policy;

use super::uri::{matches_template, parse_rewritten, rewrite};
use super::{
    Deliver, Inputs, MAX_KNOWN_URIS, MAX_SUBSCRIPTIONS_PER_SESSION, MAX_TEMPLATES, Next,
    Passthrough, Round, Subscriber, mcp_error, read_pages,
};

/// A 2026-07-28 listener's resource subscriptions
/// ([`Passthrough::subscribe_listener`]): released when dropped, and the
/// upstream unsubscribed (in the background) from those no one else holds.
pub(crate) struct ListenerSubscriptions {
    passthrough: Arc<Passthrough>,
    id: u64,
    keys: Vec<(usize, String)>,
}

impl Drop for ListenerSubscriptions {
    fn drop(&mut self) {
        for key in std::mem::take(&mut self.keys) {
            if !self.passthrough.drop_subscriber(&key, self.id) {
                continue;
            }
            let (index, uri) = key;
            let upstream = self.passthrough.upstreams[index].clone();
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move {
                    let unsubscribed = upstream
                        .unsubscribe_resource(&uri, CancellationToken::new())
                        .await;
                    if let Err(e) = unsubscribed {
                        tracing::debug!(server = upstream.name(), error = ?e, "resources/unsubscribe failed");
                    }
                });
            }
        }
    }
}

/// MCP's code for a resource that does not exist.
const RESOURCE_NOT_FOUND: i32 = -32002;

fn has_resources(c: &ServerCapabilities) -> bool {
    c.resources.is_some()
}

/// Where a URI the client used is read: the upstream, and the URI there.
struct Target {
    index: usize,
    uri: String,
}

impl Passthrough {
    /// One page of the merged `resources/list`.
    pub(crate) async fn list_resources(
        &self,
        cursor: Option<String>,
        cancel: CancellationToken,
    ) -> Result<ListResourcesResult, McpError> {
        let (items, next) = self
            .merged("resources/list", cursor, has_resources, |i, c| {
                let cancel = cancel.clone();
                async move {
                    let page = self.resources_page(i, c, cancel).await?;
                    Ok((page.resources, page.next_cursor))
                }
            })
            .await?;
        let mut result = ListResourcesResult::with_all_items(items);
        result.next_cursor = next;
        Ok(result)
    }

    /// One page of upstream `index`'s resources, with URIs it shares with
    /// an earlier upstream rewritten.
    async fn resources_page(
        &self,
        index: usize,
        cursor: Option<String>,
        cancel: CancellationToken,
    ) -> Result<ListResourcesResult, McpError> {
        let params = PaginatedRequestParams::default().with_cursor(cursor);
        let request = ClientRequest::ListResourcesRequest(ListResourcesRequest::with_param(params));
        let mut page: ListResourcesResult = self.relay(index, request, cancel).await?;
        let server = self.upstreams[index].name();
        page.resources.retain_mut(|resource| {
            // Every URI is claimed (ownership is not the caller's);
            // only those the caller may read are listed.
            let published = self.claim(index, &resource.uri);
            let visible = self.may(&policy::Target::Resource {
                namespace: server,
                uri: &resource.uri,
            });
            if let Some(published) = published {
                resource.uri = published;
            }
            visible
        });
        Ok(page)
    }

    /// Records that upstream `index` lists `uri`. Returns the rewritten URI
    /// when an earlier upstream owns it.
    fn claim(&self, index: usize, uri: &str) -> Option<String> {
        let owner = {
            let mut owners = self.owners.lock();
            let full = owners.len() >= MAX_KNOWN_URIS;
            match owners.get_mut(uri) {
                Some(owner) => {
                    if index < *owner {
                        *owner = index;
                    }
                    *owner
                }
                None if full => index,
                None => {
                    owners.insert(uri.to_owned(), index);
                    index
                }
            }
        };
        if owner == index {
            return None;
        }
        let server = self.upstreams[index].name();
        if self.log_once(uri.to_owned(), index) {
            tracing::warn!(
                uri,
                server,
                owner = self.upstreams[owner].name(),
                "two servers list the same resource URI; the later one publishes it as {}",
                rewrite(server, uri)
            );
        }
        Some(rewrite(server, uri))
    }

    /// One page of the merged `resources/templates/list`; the templates
    /// are remembered to find the server of a URI.
    pub(crate) async fn list_resource_templates(
        &self,
        cursor: Option<String>,
        cancel: CancellationToken,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        let (items, next) = self
            .merged("resources/templates/list", cursor, has_resources, |i, c| {
                let cancel = cancel.clone();
                async move {
                    let first = c.is_none();
                    let mut page = self.templates_page(i, c, cancel).await?;
                    self.remember_templates(i, first, &page);
                    let server = self.upstreams[i].name();
                    page.resource_templates.retain(|t| {
                        self.may(&policy::Target::Resource {
                            namespace: server,
                            uri: &t.uri_template,
                        })
                    });
                    Ok((page.resource_templates, page.next_cursor))
                }
            })
            .await?;
        let mut result = ListResourceTemplatesResult::with_all_items(items);
        result.next_cursor = next;
        Ok(result)
    }

    async fn templates_page(
        &self,
        index: usize,
        cursor: Option<String>,
        cancel: CancellationToken,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        let params = PaginatedRequestParams::default().with_cursor(cursor);
        let request = ClientRequest::ListResourceTemplatesRequest(
            ListResourceTemplatesRequest::with_param(params),
        );
        self.relay(index, request, cancel).await
    }

    fn remember_templates(&self, index: usize, first: bool, page: &ListResourceTemplatesResult) {
        let mut templates = self.templates.lock();
        let known = templates.entry(index).or_default();
        if first {
            known.clear();
        }
        let room = MAX_TEMPLATES.saturating_sub(known.len());
        known.extend(
            page.resource_templates
                .iter()
                .take(room)
                .map(|t| t.uri_template.clone()),
        );
    }

    /// `resources/read`: relayed to the URI's owner; contents keep the URI
    /// the client asked for, and an `input_required` answer goes as
    /// `inputs` says. With `verbatim` (the connection's transport releases
    /// kept results), a large result may come back as a placeholder that
    /// the transport replaces with the server's bytes.
    pub(crate) async fn read_resource(
        &self,
        params: ReadResourceRequestParams,
        cancel: CancellationToken,
        inputs: Inputs,
        verbatim: bool,
    ) -> Result<ReadResourceResponse, McpError> {
        let asked = params.uri.clone();
        let target = self.target(&asked, cancel.clone()).await?;
        self.authorize(&policy::Target::Resource {
            namespace: self.upstreams[target.index].name(),
            uri: &target.uri,
        })?;
        let mut params = params;
        params.meta = None;
        params.uri = target.uri.clone();
        let round = Round {
            method: "resources/read",
            server: self.upstreams[target.index].name(),
            target: &target.uri,
        };
        params.request_state = self.opened_state(round, inputs, params.request_state.take())?;
        if inputs == Inputs::Asked {
            // Only a client that is answered with input_required answers it.
            params.input_responses = None;
        }
        let mut request = ClientRequest::ReadResourceRequest(ReadResourceRequest::new(params));
        if verbatim && asked == target.uri {
            // A large result may then reach the client as the server wrote
            // it; only when its URIs need no rewriting.
            rmcp::model::GetExtensions::extensions_mut(&mut request).insert(
                crate::verbatim::Verbatim {
                    modern: inputs == Inputs::Returned,
                },
            );
        }
        let mut result: ReadResourceResult = match self
            .relay_inputs(target.index, &target.uri, request, cancel, inputs)
            .await?
        {
            Ok(result) => result,
            Err(asks) => return Ok(ReadResourceResponse::InputRequired(asks)),
        };
        if asked != target.uri {
            for contents in &mut result.contents {
                if let ResourceContents::TextResourceContents { uri, .. }
                | ResourceContents::BlobResourceContents { uri, .. } = contents
                    && *uri == target.uri
                {
                    *uri = asked.clone();
                }
            }
        }
        Ok(ReadResourceResponse::Complete(result))
    }

    /// `resources/subscribe`: the owner is subscribed once, however many
    /// downstream sessions subscribe.
    pub(crate) async fn subscribe(
        &self,
        session: u64,
        peer: Peer<RoleServer>,
        uri: String,
        cancel: CancellationToken,
    ) -> Result<(), McpError> {
        self.subscribe_as(session, Deliver::Session(peer), uri, cancel)
            .await
            .map(drop)
    }

    /// The resource subscriptions of a 2026-07-28 listener (`id`, unique
    /// among sessions and listeners): each of `uris` is routed and
    /// authorized for the current caller and subscribed as
    /// [`Passthrough::subscribe`] does, its updates sent to `to`. All or
    /// none: on the first failure the ones made are released. They last
    /// until the returned guard is dropped.
    pub(crate) async fn subscribe_listener(
        self: &Arc<Self>,
        id: u64,
        uris: &[String],
        to: mpsc::Sender<String>,
        cancel: CancellationToken,
    ) -> Result<ListenerSubscriptions, McpError> {
        let mut held = ListenerSubscriptions {
            passthrough: self.clone(),
            id,
            keys: Vec::with_capacity(uris.len()),
        };
        for uri in uris {
            let key = self
                .subscribe_as(
                    id,
                    Deliver::Listener(to.clone()),
                    uri.clone(),
                    cancel.clone(),
                )
                .await?;
            held.keys.push(key);
        }
        Ok(held)
    }

    /// Subscribes `session` to `uri`, delivered `to`, the owner once
    /// ([`Upstream::subscribe_resource`](crate::upstream::Upstream::subscribe_resource));
    /// the key it is held under.
    async fn subscribe_as(
        &self,
        session: u64,
        to: Deliver,
        uri: String,
        cancel: CancellationToken,
    ) -> Result<(usize, String), McpError> {
        let target = self.target(&uri, cancel.clone()).await?;
        self.authorize(&policy::Target::Resource {
            namespace: self.upstreams[target.index].name(),
            uri: &target.uri,
        })?;
        let key = (target.index, target.uri.clone());
        let first = {
            let mut subs = self.subscribers.lock();
            let held = subs
                .iter()
                .filter(|(k, list)| **k != key && list.iter().any(|s| s.session == session))
                .count();
            if held >= MAX_SUBSCRIPTIONS_PER_SESSION {
                return Err(McpError::invalid_request(
                    format!(
                        "at most {MAX_SUBSCRIPTIONS_PER_SESSION} resource subscriptions per session"
                    ),
                    None,
                ));
            }
            let list = subs.entry(key.clone()).or_default();
            list.retain(|s| !s.to.is_closed() && s.session != session);
            list.push(Subscriber { session, to, uri });
            list.len() == 1
        };
        if first {
            let upstream = &self.upstreams[target.index];
            if let Err(e) = upstream.subscribe_resource(&target.uri, cancel).await {
                self.drop_subscriber(&key, session);
                return Err(mcp_error(e, upstream.name()));
            }
        }
        Ok(key)
    }

    /// `resources/unsubscribe`: the owner is unsubscribed when no session
    /// is left subscribed.
    pub(crate) async fn unsubscribe(
        &self,
        session: u64,
        uri: String,
        cancel: CancellationToken,
    ) -> Result<(), McpError> {
        let target = self.target(&uri, cancel.clone()).await?;
        let key = (target.index, target.uri.clone());
        if self.drop_subscriber(&key, session) {
            let upstream = &self.upstreams[target.index];
            upstream
                .unsubscribe_resource(&target.uri, cancel)
                .await
                .map_err(|e| mcp_error(e, upstream.name()))?;
        }
        Ok(())
    }

    /// Removes `session`'s subscription to `key`; true when that was the
    /// last one.
    fn drop_subscriber(&self, key: &(usize, String), session: u64) -> bool {
        let mut subs = self.subscribers.lock();
        let Some(list) = subs.get_mut(key) else {
            return false;
        };
        let before = list.len();
        list.retain(|s| s.session != session && !s.to.is_closed());
        let last = list.is_empty() && before > 0;
        if list.is_empty() {
            subs.remove(key);
        }
        last
    }

    /// The upstream a URI is read from: a rewritten URI names it; else the
    /// server that listed the URI (the lists are read again once when it is
    /// not known yet), else the one whose URI template matches, else the
    /// only server with resources.
    async fn target(&self, uri: &str, cancel: CancellationToken) -> Result<Target, McpError> {
        if let Some((server, original)) = parse_rewritten(uri)
            && let Some(index) = self.index_of(server)
        {
            return Ok(Target {
                index,
                uri: original,
            });
        }
        let owned = || self.owners.lock().get(uri).copied();
        let mut index = owned().or_else(|| self.template_owner(uri));
        if index.is_none() && self.relearn_due() {
            self.learn_owners(cancel.clone()).await;
            self.learn_templates(cancel).await;
            index = owned().or_else(|| self.template_owner(uri));
        }
        if index.is_none() {
            let with: Vec<usize> = (0..self.upstreams.len())
                .filter(|&i| self.has(i, has_resources))
                .collect();
            if let [only] = with[..] {
                index = Some(only);
            }
        }
        match index {
            Some(index) => Ok(Target {
                index,
                uri: uri.to_owned(),
            }),
            None => Err(McpError::new(
                rmcp::model::ErrorCode(RESOURCE_NOT_FOUND),
                format!("resource not found: {uri}"),
                Some(json!({"uri": uri})),
            )),
        }
    }

    /// Reads every upstream's resource list (bounded) to learn who owns
    /// which URI.
    async fn learn_owners(&self, cancel: CancellationToken) {
        for index in 0..self.upstreams.len() {
            if !self.has(index, has_resources) {
                continue;
            }
            read_pages(
                |cursor| self.resources_page(index, cursor, cancel.clone()),
                |_, page| Next::after(page.next_cursor),
            )
            .await;
        }
    }

    /// The first upstream one of whose known URI templates matches `uri`.
    fn template_owner(&self, uri: &str) -> Option<usize> {
        let templates = self.templates.lock();
        (0..self.upstreams.len()).find(|i| {
            templates
                .get(i)
                .is_some_and(|ts| ts.iter().any(|t| matches_template(t, uri)))
        })
    }

    /// Reads every upstream's URI templates (bounded).
    pub(super) async fn learn_templates(&self, cancel: CancellationToken) {
        for index in 0..self.upstreams.len() {
            if !self.has(index, has_resources) {
                continue;
            }
            read_pages(
                |cursor| self.templates_page(index, cursor, cancel.clone()),
                |number, page| {
                    self.remember_templates(index, number == 0, &page);
                    Next::after(page.next_cursor)
                },
            )
            .await;
        }
    }

    /// True, at most once per [`RELEARN_AFTER`](super::RELEARN_AFTER), when an unknown URI or
    /// template may read the upstreams' lists again.
    pub(super) fn relearn_due(&self) -> bool {
        super::due(&self.learned)
    }
}
