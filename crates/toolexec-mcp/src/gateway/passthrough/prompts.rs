//! `prompts/list`, `prompts/get` and `completion/complete`, relayed to the
//! upstream that owns each prompt or resource template. Prompts are
//! published as `server__name`, or under their own names for servers
//! configured unprefixed.

use rmcp::ErrorData as McpError;
use rmcp::model::{
    ClientRequest, CompleteRequest, CompleteRequestParams, CompleteResult, GetPromptRequest,
    GetPromptRequestParams, GetPromptResponse, ListPromptsRequest, ListPromptsResult,
    PaginatedRequestParams, Reference, ServerCapabilities,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use toolexec::policy;

use super::super::names::{NameConflict, SEPARATOR};
use super::uri::parse_rewritten;
use super::{Inputs, MAX_TEMPLATES, Next, Passthrough, Round, due, read_pages};

fn has_prompts(c: &ServerCapabilities) -> bool {
    c.prompts.is_some()
}

impl Passthrough {
    /// One page of the merged `prompts/list`, names prefixed with their
    /// server's.
    pub(crate) async fn list_prompts(
        &self,
        cursor: Option<String>,
        cancel: CancellationToken,
    ) -> Result<ListPromptsResult, McpError> {
        let (items, next) = self
            .merged("prompts/list", cursor, has_prompts, |i, c| {
                let cancel = cancel.clone();
                async move {
                    let params = PaginatedRequestParams::default().with_cursor(c);
                    let request =
                        ClientRequest::ListPromptsRequest(ListPromptsRequest::with_param(params));
                    let mut page: ListPromptsResult = self.relay(i, request, cancel).await?;
                    let server = self.upstreams[i].name();
                    if self.unprefixed[i] {
                        self.remember_prompts(i, page.prompts.iter().map(|p| p.name.as_str()));
                        page.prompts.retain(|p| self.prompt_keeps_name(i, &p.name));
                    }
                    page.prompts.retain(|p| {
                        self.may(&policy::Target::Prompt {
                            namespace: server,
                            name: &p.name,
                        })
                    });
                    if !self.unprefixed[i] {
                        for prompt in &mut page.prompts {
                            prompt.name = format!("{server}{SEPARATOR}{}", prompt.name);
                        }
                    }
                    Ok((page.prompts, page.next_cursor))
                }
            })
            .await?;
        let mut result = ListPromptsResult::with_all_items(items);
        result.next_cursor = next;
        Ok(result)
    }

    /// Adds names to those known for unprefixed upstream `index` (at
    /// most [`MAX_TEMPLATES`]). Pages a client reads only add: a partial
    /// list must never make a name look like another server's alone.
    fn remember_prompts<'a>(&self, index: usize, names: impl IntoIterator<Item = &'a str>) {
        let mut known = self.prompt_names.lock();
        let set = known.entry(index).or_default();
        for name in names {
            if set.len() >= MAX_TEMPLATES {
                break;
            }
            set.insert(name.to_owned());
        }
    }

    /// Whether unprefixed upstream `index` publishes its prompt `name`
    /// under that name: no other unprefixed upstream is known to list one,
    /// and the name does not read as `server__prompt` of a configured
    /// server (those names are never an unprefixed server's). A prompt
    /// left out is logged once.
    fn prompt_keeps_name(&self, index: usize, name: &str) -> bool {
        if self.server_form(name).is_none() && self.prompt_claimants(name) == [index] {
            return true;
        }
        if self.log_once(format!("prompt {name}"), index) {
            tracing::warn!(
                prompt = name,
                server = self.upstreams[index].name(),
                "prompt not published under its name: another server claims it too"
            );
        }
        false
    }

    /// The unprefixed upstreams known to list a prompt `name`.
    fn prompt_claimants(&self, name: &str) -> Vec<usize> {
        let known = self.prompt_names.lock();
        (0..self.upstreams.len())
            .filter(|i| self.unprefixed[*i] && known.get(i).is_some_and(|n| n.contains(name)))
            .collect()
    }

    /// For `server__prompt` naming a configured server: that server's
    /// index and the prompt's name.
    fn server_form(&self, name: &str) -> Option<(usize, String)> {
        let (server, original) = name.split_once(SEPARATOR)?;
        let index = self.index_of(server)?;
        (!original.is_empty()).then(|| (index, original.to_owned()))
    }

    /// Reads the prompt lists of the unprefixed upstreams again. A list
    /// read to its end replaces what was known of that server (prompts it
    /// dropped are forgotten); one cut short (an error, cancellation, the
    /// page bound) only adds.
    pub(super) async fn learn_prompts(&self, cancel: CancellationToken) {
        for index in 0..self.upstreams.len() {
            if !self.unprefixed[index] || !self.has(index, has_prompts) {
                continue;
            }
            let mut fresh = std::collections::HashSet::new();
            let fetch = |cursor| {
                let params = PaginatedRequestParams::default().with_cursor(cursor);
                let request =
                    ClientRequest::ListPromptsRequest(ListPromptsRequest::with_param(params));
                self.relay::<ListPromptsResult>(index, request, cancel.clone())
            };
            let complete = read_pages(fetch, |_, page: ListPromptsResult| {
                fresh.extend(page.prompts.into_iter().map(|p| p.name).take(MAX_TEMPLATES));
                match page.next_cursor {
                    Some(_) if fresh.len() >= MAX_TEMPLATES => Next::Stop,
                    cursor => Next::after(cursor),
                }
            })
            .await;
            if complete {
                self.prompt_names.lock().insert(index, fresh);
            } else {
                self.remember_prompts(index, fresh.iter().map(String::as_str));
            }
        }
    }

    /// The upstream and original name of a published prompt name:
    /// `server__name` of a prefixed server, else the prompt of that name of
    /// the one unprefixed server that lists it. A name two unprefixed
    /// servers list is an error naming both.
    async fn prompt_owner(
        &self,
        name: &str,
        cancel: CancellationToken,
    ) -> Result<(usize, String), McpError> {
        if let Some((index, original)) = self.server_form(name) {
            if !self.unprefixed[index] {
                return Ok((index, original));
            }
            return Err(McpError::invalid_params(
                format!(
                    "unknown prompt {name:?} (server {:?} publishes its prompts under their own names)",
                    self.upstreams[index].name()
                ),
                None,
            ));
        }
        let mut claimants = self.prompt_claimants(name);
        // Not listed yet: read the unprefixed servers' lists again
        // (rate-limited).
        if claimants.is_empty() && self.unprefixed.contains(&true) && due(&self.prompts_learned) {
            self.learn_prompts(cancel).await;
            claimants = self.prompt_claimants(name);
        }
        match claimants[..] {
            [index] => Ok((index, name.to_owned())),
            [] => Err(McpError::invalid_params(
                format!("unknown prompt {name:?} (prompts are named server{SEPARATOR}name)"),
                None,
            )),
            _ => {
                let servers: Vec<&str> = claimants
                    .iter()
                    .map(|&i| self.upstreams[i].name())
                    .collect();
                Err(McpError::invalid_params(
                    format!(
                        "prompt name {name:?} is ambiguous: servers {} all publish it (prefix = false)",
                        servers.join(", ")
                    ),
                    Some(json!({"prompt": name, "servers": servers})),
                ))
            }
        }
    }

    /// Prompts that two unprefixed servers list under one name (reads the
    /// lists now).
    pub(crate) async fn prompt_conflicts(&self, cancel: CancellationToken) -> Vec<NameConflict> {
        self.learn_prompts(cancel).await;
        let names: std::collections::BTreeSet<String> = self
            .prompt_names
            .lock()
            .values()
            .flatten()
            .cloned()
            .collect();
        names
            .into_iter()
            .filter_map(|name| {
                let claimants = self.prompt_claimants(&name);
                (claimants.len() > 1).then(|| NameConflict {
                    kind: "prompt",
                    claimants: claimants
                        .iter()
                        .map(|&i| format!("{}:{name}", self.upstreams[i].name()))
                        .collect(),
                    name,
                })
            })
            .collect()
    }

    /// `prompts/get`: relayed to the prompt's server under its own name;
    /// the messages come back unchanged, and an `input_required` answer
    /// as `inputs` says.
    pub(crate) async fn get_prompt(
        &self,
        mut params: GetPromptRequestParams,
        cancel: CancellationToken,
        inputs: Inputs,
    ) -> Result<GetPromptResponse, McpError> {
        let (index, original) = self.prompt_owner(&params.name, cancel.clone()).await?;
        self.authorize(&policy::Target::Prompt {
            namespace: self.upstreams[index].name(),
            name: &original,
        })?;
        params.meta = None;
        let round = Round {
            method: "prompts/get",
            server: self.upstreams[index].name(),
            target: &original,
        };
        params.request_state = self.opened_state(round, inputs, params.request_state.take())?;
        if inputs == Inputs::Asked {
            // Only a client that is answered with input_required answers it.
            params.input_responses = None;
        }
        params.name = original.clone();
        let request = ClientRequest::GetPromptRequest(GetPromptRequest::new(params));
        Ok(
            match self
                .relay_inputs(index, &original, request, cancel, inputs)
                .await?
            {
                Ok(result) => GetPromptResponse::Complete(result),
                Err(asks) => GetPromptResponse::InputRequired(asks),
            },
        )
    }

    /// `completion/complete`: for a prompt argument, relayed to the
    /// prompt's server; for a resource template variable, to the server
    /// whose template it is.
    pub(crate) async fn complete(
        &self,
        mut params: CompleteRequestParams,
        cancel: CancellationToken,
    ) -> Result<CompleteResult, McpError> {
        params.meta = None;
        let index = match &mut params.r#ref {
            Reference::Prompt(prompt) => {
                let (index, original) = self.prompt_owner(&prompt.name, cancel.clone()).await?;
                self.authorize(&policy::Target::Prompt {
                    namespace: self.upstreams[index].name(),
                    name: &original,
                })?;
                prompt.name = original;
                index
            }
            Reference::Resource(template) => {
                let index = if let Some((server, original)) = parse_rewritten(&template.uri)
                    && let Some(index) = self.index_of(server)
                {
                    template.uri = original;
                    index
                } else {
                    self.template_server(&template.uri, cancel.clone()).await?
                };
                self.authorize(&policy::Target::Resource {
                    namespace: self.upstreams[index].name(),
                    uri: &template.uri,
                })?;
                index
            }
            _ => {
                return Err(McpError::invalid_params(
                    "completion/complete: unknown reference type",
                    None,
                ));
            }
        };
        let request = ClientRequest::CompleteRequest(CompleteRequest::new(params));
        self.relay(index, request, cancel).await
    }

    /// The first upstream that lists `template` among its URI templates.
    async fn template_server(
        &self,
        template: &str,
        cancel: CancellationToken,
    ) -> Result<usize, McpError> {
        let find = || {
            let templates = self.templates.lock();
            (0..self.upstreams.len()).find(|i| {
                templates
                    .get(i)
                    .is_some_and(|ts| ts.iter().any(|t| t == template))
            })
        };
        if let Some(i) = find() {
            return Ok(i);
        }
        // Not listed yet: read the lists again (rate-limited).
        if self.relearn_due() {
            self.learn_templates(cancel).await;
        }
        find().ok_or_else(|| {
            McpError::invalid_params(format!("unknown resource template {template:?}"), None)
        })
    }
}
