//! The import of a server's tool listing into the catalog: names mapped to
//! toolexec ids, definitions converted, changes applied by difference.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use serde_json::{Map, Value};
use toolexec::{ListRequest, Tool};

use super::call::ToolBackend;
use super::convert;
use super::shared::{Shared, ToolSet};
use toolexec::names;

impl Shared {
    /// Imports a listing into the catalog by difference. Returns the number
    /// of tools imported.
    pub(crate) fn sync_tools(self: &Arc<Self>, raw: Vec<Map<String, Value>>) -> usize {
        let by_name: BTreeMap<&str, &Map<String, Value>> = raw
            .iter()
            .filter_map(|t| match t.get("name").and_then(Value::as_str) {
                Some(name) => Some((name, t)),
                None => {
                    tracing::warn!(server = %self.name, "skipping a tool without a name");
                    None
                }
            })
            .collect();
        let mapping = names::map_names(by_name.keys().copied());
        for (original, mapped, winner) in &mapping.collisions {
            tracing::warn!(
                server = %self.name,
                tool = %original,
                id = %format!("{}:{mapped}", self.name),
                kept = %winner,
                "skipping MCP tool: its mapped name collides with another tool's"
            );
        }
        let mut set = self.tools.lock();
        if set.closed {
            return 0;
        }
        let foreign = self.foreign_ids(&set);
        let mut next: BTreeMap<String, (Tool, String)> = BTreeMap::new();
        for (mapped, original) in mapping.kept {
            let id = format!("{}:{mapped}", self.name);
            if foreign.contains(&id) {
                tracing::warn!(server = %self.name, %id, "skipping MCP tool: the id is registered by another backend");
                continue;
            }
            let tool = match convert::tool_from_mcp(&id, by_name[original.as_str()]) {
                Ok(t) => t,
                Err(e) => {
                    tracing::warn!(server = %self.name, tool = %original, error = %e, "skipping MCP tool");
                    continue;
                }
            };
            if let Some((old, old_original)) = set.tools.get(&id)
                && *old == tool
                && *old_original == original
            {
                next.insert(id, (tool, original));
                continue;
            }
            let backend = Arc::new(ToolBackend {
                shared: self.clone(),
                remote_name: original.clone(),
            });
            match self.catalog.replace(tool.clone(), backend) {
                Ok(_) => {
                    next.insert(id, (tool, original));
                }
                Err(e) => {
                    tracing::warn!(server = %self.name, tool = %original, error = %e, "skipping MCP tool");
                }
            }
        }
        for id in set.tools.keys() {
            if !next.contains_key(id) {
                let _ = self.catalog.unregister(id);
            }
        }
        set.tools = next;
        set.tools.len()
    }

    /// Ids in our namespace registered by someone else.
    fn foreign_ids(&self, set: &ToolSet) -> HashSet<String> {
        let mut foreign = HashSet::new();
        let mut req = ListRequest {
            namespace: Some(self.name.to_string()),
            cursor: None,
            limit: Some(toolexec::catalog::MAX_PAGE),
        };
        while let Ok(page) = self.catalog.list(&req) {
            for t in &page.tools {
                let id = t.tool().id.to_string();
                if !set.tools.contains_key(&id) {
                    foreign.insert(id);
                }
            }
            match page.next_cursor {
                Some(c) => req.cursor = Some(c),
                None => break,
            }
        }
        foreign
    }
}
