//! `prompts/list`, `prompts/get` and `completion/complete`, relayed to the
//! upstream that owns each prompt or resource template. Prompts are
//! published as `server__name`.

use rmcp::ErrorData as McpError;
use rmcp::model::{
    ClientRequest, CompleteRequest, CompleteRequestParams, CompleteResult, GetPromptRequest,
    GetPromptRequestParams, GetPromptResult, ListPromptsRequest, ListPromptsResult,
    PaginatedRequestParams, Reference, ServerCapabilities,
};
use tokio_util::sync::CancellationToken;

use super::super::names::SEPARATOR;
use super::Passthrough;
use super::uri::parse_rewritten;

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
                    for prompt in &mut page.prompts {
                        prompt.name = format!("{server}{SEPARATOR}{}", prompt.name);
                    }
                    Ok((page.prompts, page.next_cursor))
                }
            })
            .await?;
        let mut result = ListPromptsResult::with_all_items(items);
        result.next_cursor = next;
        Ok(result)
    }

    /// The upstream and original name of a published prompt name.
    fn prompt_owner(&self, name: &str) -> Result<(usize, String), McpError> {
        name.split_once(SEPARATOR)
            .and_then(|(server, original)| {
                let index = self.index_of(server)?;
                (!original.is_empty()).then(|| (index, original.to_owned()))
            })
            .ok_or_else(|| {
                McpError::invalid_params(
                    format!("unknown prompt {name:?} (prompts are named server{SEPARATOR}name)"),
                    None,
                )
            })
    }

    /// `prompts/get`: relayed to the prompt's server under its own name;
    /// the messages come back unchanged.
    pub(crate) async fn get_prompt(
        &self,
        mut params: GetPromptRequestParams,
        cancel: CancellationToken,
    ) -> Result<GetPromptResult, McpError> {
        let (index, original) = self.prompt_owner(&params.name)?;
        params.meta = None;
        params.name = original;
        let request = ClientRequest::GetPromptRequest(GetPromptRequest::new(params));
        self.relay(index, request, cancel).await
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
                let (index, original) = self.prompt_owner(&prompt.name)?;
                prompt.name = original;
                index
            }
            Reference::Resource(template) => {
                if let Some((server, original)) = parse_rewritten(&template.uri)
                    && let Some(index) = self.index_of(server)
                {
                    template.uri = original;
                    index
                } else {
                    self.template_server(&template.uri, cancel.clone()).await?
                }
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
