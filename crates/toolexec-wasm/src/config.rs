//! Configuration of the WASM runtime.

use std::time::Duration;

use serde::Deserialize;

/// Settings of a [`crate::WasmRuntime`]: the engine, the instance pool,
/// the module cache and the limit mechanisms. Per-run limits come from
/// [`toolexec_runtime::RuntimeLimits`]; these are the runtime-wide bounds.
///
/// It deserializes from a configuration table (`[runtimes.wasm]` of
/// `toolexec.toml`): `pool_instances`, and `max_memory` as bytes or text
/// (`"256MiB"`); unset keys keep their defaults, unknown keys are refused,
/// and the other settings are not read from files. Call
/// [`WasmConfig::validate`] after.
///
/// ```
/// use toolexec_wasm::WasmConfig;
/// let config = WasmConfig { pool_instances: 16, ..WasmConfig::default() };
/// assert!(config.validate().is_ok());
/// ```
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WasmConfig {
    /// Instances that may run at once (pooling allocator slots). Runs past
    /// this wait for a free slot.
    pub pool_instances: u32,
    /// The largest linear memory of any instance, in bytes (the pool slot
    /// size). A run's `limits.memory_bytes` is capped at this. Read as
    /// `max_memory`.
    #[serde(rename = "max_memory", deserialize_with = "toolexec::units::size_u64")]
    pub max_memory_bytes: u64,
    /// Compiled modules and components kept (LRU, keyed by content hash).
    #[serde(skip)]
    pub cache_entries: usize,
    /// Fuel units granted per second of `limits.cpu_time`. One unit is
    /// roughly one WebAssembly operator; a tight arithmetic loop burns
    /// about 7.3 G units per second on a 2-core AMD EPYC VM, so the
    /// default stops such code at about 0.7 s per CPU-second and lets code
    /// with costlier operators (memory, calls) run longer: fuel counts
    /// work, not measured CPU time, and `wall_time` stays the hard bound.
    #[serde(skip)]
    pub fuel_per_cpu_second: u64,
    /// Period of the epoch ticker that interrupts running code to check
    /// the deadline and cancellation.
    #[serde(skip)]
    pub epoch_tick: Duration,
    /// Largest accepted code (binary or text), in bytes.
    #[serde(skip)]
    pub max_code_bytes: usize,
    /// Largest JSON message crossing the tool ABI (tool id and arguments,
    /// results, the unit's output value), in bytes.
    #[serde(skip)]
    pub max_message_bytes: usize,
    /// WebAssembly stack per instance, in bytes (deeper recursion traps
    /// with "call stack exhausted").
    #[serde(skip)]
    pub max_wasm_stack: usize,
    /// Table elements a store may hold in all its tables.
    #[serde(skip)]
    pub max_table_elements: usize,
}

impl Default for WasmConfig {
    /// 32 pool slots of up to 256 MiB, 64 cached modules, 5 G fuel per CPU
    /// second, a 5 ms epoch tick, 16 MiB of code, 1 MiB messages, 512 KiB
    /// of wasm stack, 100 000 table elements.
    fn default() -> Self {
        WasmConfig {
            pool_instances: 32,
            max_memory_bytes: 256 << 20,
            cache_entries: 64,
            fuel_per_cpu_second: 5_000_000_000,
            epoch_tick: Duration::from_millis(5),
            max_code_bytes: 16 << 20,
            max_message_bytes: 1 << 20,
            max_wasm_stack: 512 << 10,
            max_table_elements: 100_000,
        }
    }
}

impl WasmConfig {
    /// Checks the settings are usable; the error names the field.
    pub fn validate(&self) -> Result<(), toolexec::Error> {
        let bad = |field: &str, message: &str| {
            Err(toolexec::Error::invalid_request(
                format!("wasm.{field}"),
                message,
            ))
        };
        if self.pool_instances == 0 || self.pool_instances > 10_000 {
            return bad("pool_instances", "must be between 1 and 10000");
        }
        if self.max_memory_bytes < 1 << 16 || self.max_memory_bytes > 4 << 30 {
            return bad("max_memory_bytes", "must be between 64 KiB and 4 GiB");
        }
        if self.cache_entries == 0 {
            return bad("cache_entries", "must be at least 1");
        }
        if self.fuel_per_cpu_second == 0 {
            return bad("fuel_per_cpu_second", "must be greater than zero");
        }
        if self.epoch_tick.is_zero() || self.epoch_tick > Duration::from_secs(1) {
            return bad("epoch_tick", "must be between 1 ns and 1 s");
        }
        if self.max_code_bytes < 8 {
            return bad("max_code_bytes", "must be at least 8");
        }
        if self.max_message_bytes < 64 || self.max_message_bytes > i32::MAX as usize {
            return bad("max_message_bytes", "must be between 64 and i32::MAX");
        }
        if self.max_wasm_stack < 16 << 10 || self.max_wasm_stack > 64 << 20 {
            return bad("max_wasm_stack", "must be between 16 KiB and 64 MiB");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deserializes_its_file_keys_and_refuses_others() {
        let config: WasmConfig =
            serde_json::from_str(r#"{"pool_instances": 4, "max_memory": "64MiB"}"#).unwrap();
        assert_eq!(config.pool_instances, 4);
        assert_eq!(config.max_memory_bytes, 64 << 20);
        assert_eq!(config.cache_entries, WasmConfig::default().cache_entries);
        for key in ["pool_size", "cache_entries", "max_memory_bytes"] {
            let err = serde_json::from_str::<WasmConfig>(&format!(r#"{{"{key}": 1}}"#))
                .unwrap_err()
                .to_string();
            assert!(err.contains(&format!("unknown field `{key}`")), "{err}");
        }
        let err = serde_json::from_str::<WasmConfig>(r#"{"max_memory": "lots"}"#).unwrap_err();
        assert!(err.to_string().contains("expected a size"), "{err}");
    }

    #[test]
    fn validate_names_the_field_after_deserializing() {
        let config: WasmConfig = serde_json::from_str(r#"{"max_memory": "1KiB"}"#).unwrap();
        let err = config.validate().unwrap_err();
        assert_eq!(err.field(), Some("wasm.max_memory_bytes"));
    }
}
