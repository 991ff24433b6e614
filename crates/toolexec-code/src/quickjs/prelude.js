// Installs the `tools` and `console` globals. Runs before the user's script,
// so everything it captures (Object.create, Proxy, the host functions) is
// the original; handlers and containers have null prototypes, so later
// tampering with Object.prototype or Array.prototype cannot change how the
// host functions are reached. Tampering with the globals themselves only
// affects the script that does it: every execution has its own runtime.
(function (hostCall, hostSearch, hostDescribe, hostPrint) {
  "use strict";
  const create = Object.create;
  const defineProperty = Object.defineProperty;
  const ProxyCtor = Proxy;

  const run = function run(id, args) {
    return hostCall(id, args);
  };
  const search = async function search(query, limit) {
    return hostSearch(query, limit);
  };
  const describe = async function describe(id, detail) {
    return hostDescribe(id, detail);
  };

  const namespaces = create(null);
  const namespace = function (ns) {
    let proxy = namespaces[ns];
    if (proxy === undefined) {
      const fns = create(null);
      const handler = create(null);
      handler.get = function (_target, name) {
        if (typeof name !== "string" || name === "then") return undefined;
        let f = fns[name];
        if (f === undefined) {
          const id = ns + ":" + name;
          f = function (args) {
            return hostCall(id, args);
          };
          fns[name] = f;
        }
        return f;
      };
      proxy = new ProxyCtor(create(null), handler);
      namespaces[ns] = proxy;
    }
    return proxy;
  };

  const base = create(null);
  base.run = run;
  base.search = search;
  base.describe = describe;
  const toolsHandler = create(null);
  toolsHandler.get = function (target, name) {
    if (typeof name !== "string" || name === "then") return undefined;
    if (name === "run" || name === "search" || name === "describe") return target[name];
    return namespace(name);
  };
  const tools = new ProxyCtor(base, toolsHandler);

  const printer = function (stream) {
    return function () {
      hostPrint(stream, arguments);
    };
  };
  const console = create(null);
  console.log = printer(0);
  console.info = printer(0);
  console.debug = printer(0);
  console.warn = printer(1);
  console.error = printer(1);

  const desc = create(null);
  desc.writable = true;
  desc.configurable = true;
  desc.enumerable = false;
  desc.value = tools;
  defineProperty(globalThis, "tools", desc);
  const desc2 = create(null);
  desc2.writable = true;
  desc2.configurable = true;
  desc2.enumerable = false;
  desc2.value = console;
  defineProperty(globalThis, "console", desc2);
});
