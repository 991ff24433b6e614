//! The FastAPI fixture (`tests/fixtures/api_server.py`), started per test.
#![allow(dead_code)]

use std::process::{Child, Command};
use std::sync::Arc;

use serde_json::Value;
use toolexec::{Error, Exec, ToolOutput};
use toolexec_http::openapi::{self, Import, ImportOptions};

pub(crate) const FIXTURE: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/api_server.py");

/// The fixture's test credentials (see the top of the fixture).
pub(crate) const API_KEY: &str = "test-api-key-123";
pub(crate) const BEARER: &str = "test-bearer-token-456";
pub(crate) const BASIC: (&str, &str) = ("alice", "wonderland");
pub(crate) const CLIENT: (&str, &str) = ("toolexec-client", "toolexec-secret");

/// A running fixture; killed on drop (its stdin closes too, which ends it
/// should this process die first).
pub(crate) struct Server {
    child: Child,
    pub(crate) port: u16,
}

impl Server {
    /// Starts the fixture, or `None` after saying why it cannot run here.
    pub(crate) fn start(test: &str, extra: &[&str]) -> Option<Server> {
        let python = toolexec_testkit::dep(test, "TOOLEXEC_PYTHON")?;
        let (child, port) =
            toolexec_testkit::spawn_printing_port(Command::new(python).arg(FIXTURE).args(extra));
        Some(Server { child, port })
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Import options for the fixture's generated document, fetched from
    /// the running server.
    pub(crate) fn options(&self, name: &str) -> ImportOptions {
        ImportOptions::new(name, self.url("/openapi.json"))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The imported tools registered in a fresh [`Exec`].
pub(crate) async fn exec_with(options: ImportOptions) -> (Exec, Import) {
    let import = openapi::import(options).await.expect("import");
    let exec = Exec::new(Arc::new(toolexec::Catalog::new()));
    exec.catalog()
        .register_many(import.tools(), false)
        .expect("register");
    (exec, import)
}

/// Runs `tool` with `args`.
pub(crate) async fn run(exec: &Exec, tool: &str, args: Value) -> Result<ToolOutput, Error> {
    exec.run_tool(tool, args).await
}
