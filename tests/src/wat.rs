//! Components of the world `tool-plugin` written by hand in the WebAssembly text format, with no
//! Rust SDK involved: for testing other toolchains' components and hostile ones.
//!
//! The core module keeps its data at fixed addresses: the tool list at 256, strings from 4096,
//! the `tools` return area at 64, and one `execute` return area per output at [`ret`]`(i)`.
//! Its `cabi_realloc` bumps a pointer from the page after the data.

/// Where the tool list's records are.
const LIST_AT: usize = 256;
/// Where strings start.
const STRINGS_AT: usize = 4096;
/// The return area of `tools`.
const TOOLS_RET: usize = 64;
/// The first return area of `execute`; one every 16 bytes.
const EXECUTE_RET: usize = 96;
/// Most outputs a component may have.
const MAX_OUTPUTS: usize = 10;

/// The address of the return area of `execute` that returns `Ok(outputs[index])`, for a
/// custom `execute` body to return.
pub fn ret(index: usize) -> usize {
    assert!(index < MAX_OUTPUTS, "at most {MAX_OUTPUTS} outputs");
    EXECUTE_RET + index * 16
}

/// What contract 0.2.0 adds to one tool's `tool-meta`: a title, an output schema, and the
/// hints read-only, destructive, idempotent and open-world.
#[derive(Debug, Clone, Default)]
pub struct MetaV2 {
    /// `title`.
    pub title: Option<String>,
    /// `output-schema`.
    pub output_schema: Option<String>,
    /// `annotations`: read-only, destructive, idempotent, open-world.
    pub hints: [Option<bool>; 4],
}

/// A hand-written component: what `tools` lists, what `execute` can return, and the code.
#[derive(Debug, Clone, Default)]
pub struct WatComponent {
    tools: Vec<(String, String, String)>,
    outputs: Vec<String>,
    execute: Option<String>,
    extra: String,
    /// Contract 0.2.0, with each tool's additions (in the order of `tools`).
    v2: Option<Vec<MetaV2>>,
    /// Whether the component defines a resource of its own, whose `resource.new` the core
    /// module imports as `$resource-new` (`(param i32) (result i32)`).
    own_resource: bool,
}

impl WatComponent {
    /// A component listing these tools (name, description, input schema).
    pub fn new(tools: &[(&str, &str, &str)]) -> Self {
        Self {
            tools: tools
                .iter()
                .map(|(n, d, s)| ((*n).to_owned(), (*d).to_owned(), (*s).to_owned()))
                .collect(),
            ..Self::default()
        }
    }

    /// Adds an output: `execute` returns the first one unless its body says otherwise (it
    /// returns [`ret`]`(i)` for the i-th).
    pub fn output(mut self, text: &str) -> Self {
        self.outputs.push(text.to_owned());
        self
    }

    /// The body of `execute (param $name i32) (param $name-len i32) (param $input i32)
    /// (param $input-len i32) (result i32)`, which returns the address of a return area.
    pub fn execute(mut self, body: &str) -> Self {
        self.execute = Some(body.to_owned());
        self
    }

    /// An `execute` that returns its input as its output, unchanged.
    pub fn echo(self) -> Self {
        let at = EXECUTE_RET;
        self.execute(&format!(
            "(i32.store8 (i32.const {at}) (i32.const 0))
             (i32.store (i32.const {}) (local.get $input))
             (i32.store (i32.const {}) (local.get $input-len))
             (i32.const {at})",
            at + 4,
            at + 8
        ))
    }

    /// A component of contract 0.2.0 (importing its `types` and `host`), with these additions
    /// to each tool's meta, in the order of the tools.
    pub fn v2(mut self, metas: Vec<MetaV2>) -> Self {
        assert_eq!(metas.len(), self.tools.len(), "one MetaV2 per tool");
        self.v2 = Some(metas);
        self
    }

    /// Defines a resource of the component's own (`rep` i32) and gives the core module its
    /// `resource.new` as `$resource-new` (`(param i32) (result i32)`): each call makes a
    /// handle in the store without host code in the loop.
    pub fn own_resource(mut self) -> Self {
        self.own_resource = true;
        self
    }

    /// More items for the core module (functions, memories, tables, a start function).
    pub fn core_items(mut self, items: &str) -> Self {
        self.extra.push_str(items);
        self.extra.push('\n');
        self
    }

    /// The component's text.
    pub fn text(&self) -> String {
        let strings: usize = self
            .tools
            .iter()
            .map(|(n, d, s)| n.len() + d.len() + s.len())
            .chain(self.outputs.iter().map(String::len))
            .chain(self.v2.iter().flatten().map(|m| {
                m.title.as_ref().map_or(0, String::len)
                    + m.output_schema.as_ref().map_or(0, String::len)
            }))
            .sum();
        // The data, then the heap from the next page on.
        let heap = (STRINGS_AT + strings).div_ceil(65536).max(1) * 65536;
        let pages = heap / 65536 + 1;
        let mut memory = vec![0u8; STRINGS_AT + strings];
        let mut next_string = STRINGS_AT;
        let mut put_string = |memory: &mut Vec<u8>, text: &str| -> (u32, u32) {
            let at = next_string;
            memory[at..at + text.len()].copy_from_slice(text.as_bytes());
            next_string += text.len();
            (at as u32, text.len() as u32)
        };
        let put_u32 = |memory: &mut Vec<u8>, at: usize, value: u32| {
            memory[at..at + 4].copy_from_slice(&value.to_le_bytes());
        };
        // 0.1.0: three strings (24 bytes). 0.2.0: then two option<string> (12 bytes each: a
        // discriminant, the string at +4) and four option<bool> (2 bytes each): 56 bytes.
        let record_size = if self.v2.is_some() { 56 } else { 24 };
        assert!(
            LIST_AT + self.tools.len() * record_size <= STRINGS_AT,
            "the tool list fits below the strings"
        );
        for (index, (name, description, schema)) in self.tools.iter().enumerate() {
            let record = LIST_AT + index * record_size;
            for (field, text) in [name, description, schema].into_iter().enumerate() {
                let (ptr, len) = put_string(&mut memory, text);
                put_u32(&mut memory, record + field * 8, ptr);
                put_u32(&mut memory, record + field * 8 + 4, len);
            }
            let Some(meta) = self.v2.as_ref().map(|v2| &v2[index]) else {
                continue;
            };
            for (at, text) in [
                (record + 24, &meta.title),
                (record + 36, &meta.output_schema),
            ] {
                if let Some(text) = text {
                    memory[at] = 1;
                    let (ptr, len) = put_string(&mut memory, text);
                    put_u32(&mut memory, at + 4, ptr);
                    put_u32(&mut memory, at + 8, len);
                }
            }
            for (hint, value) in meta.hints.iter().enumerate() {
                if let Some(value) = value {
                    memory[record + 48 + hint * 2] = 1;
                    memory[record + 48 + hint * 2 + 1] = u8::from(*value);
                }
            }
        }
        put_u32(&mut memory, TOOLS_RET, LIST_AT as u32);
        put_u32(&mut memory, TOOLS_RET + 4, self.tools.len() as u32);
        let outputs = if self.outputs.is_empty() {
            vec![String::new()]
        } else {
            self.outputs.clone()
        };
        for (index, output) in outputs.iter().enumerate() {
            let (ptr, len) = put_string(&mut memory, output);
            let at = ret(index);
            memory[at] = 0; // result::ok
            put_u32(&mut memory, at + 4, ptr);
            put_u32(&mut memory, at + 8, len);
        }
        let data: String = memory.iter().map(|b| format!("\\{b:02x}")).collect();
        let execute = self
            .execute
            .clone()
            .unwrap_or_else(|| format!("i32.const {EXECUTE_RET}"));
        let extra = &self.extra;

        let imports = if self.v2.is_some() {
            r#"(import "llm-worker:tool/types@0.2.0" (instance $types
    (type $hints (record (field "read-only" (option bool)) (field "destructive" (option bool))
      (field "idempotent" (option bool)) (field "open-world" (option bool))))
    (export "annotations" (type $annotations (eq $hints)))
    (type $meta (record (field "name" string) (field "description" string) (field "input-schema" string)
      (field "title" (option string)) (field "output-schema" (option string))
      (field "annotations" $annotations)))
    (export "tool-meta" (type (eq $meta)))
    (type $err (variant (case "invalid-argument" string) (case "execution-failed" string) (case "internal" string)))
    (export "tool-error" (type (eq $err)))))
  (import "llm-worker:tool/host@0.2.0" (instance $host
    (type $level (enum "trace" "debug" "info" "warn" "error"))
    (export "level" (type $level-t (eq $level)))
    (export "log" (func (param "level" $level-t) (param "message" string)))
    (export "progress" (func (param "done" f64) (param "total" (option f64)) (param "message" (option string))))))"#
        } else {
            r#"(import "llm-worker:tool/types@0.1.0" (instance $types
    (type $meta (record (field "name" string) (field "description" string) (field "input-schema" string)))
    (export "tool-meta" (type (eq $meta)))
    (type $err (variant (case "invalid-argument" string) (case "execution-failed" string) (case "internal" string)))
    (export "tool-error" (type (eq $err)))))"#
        };

        let (resource, resource_import, instantiate) = if self.own_resource {
            (
                r#"(type $own (resource (rep i32)))
  (core func $own-new (canon resource.new $own))
  (core instance $own-env (export "resource-new" (func $own-new)))"#,
                r#"(import "own" "resource-new" (func $resource-new (param i32) (result i32)))"#,
                r#"(instantiate $m (with "own" (instance $own-env)))"#,
            )
        } else {
            ("", "", "(instantiate $m)")
        };
        format!(
            r#"(component
  {imports}
  (alias export $types "tool-meta" (type $tool-meta))
  (alias export $types "tool-error" (type $tool-error))
  {resource}
  (core module $m
    {resource_import}
    (memory (export "memory") {pages})
    (data (i32.const 0) "{data}")
    (global $heap (mut i32) (i32.const {heap}))
    (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32)
      (local $at i32)
      global.get $heap
      local.set $at
      global.get $heap
      local.get 3
      i32.add
      global.set $heap
      ;; grow the memory when the bump pointer passes its end
      (if (i32.gt_u (global.get $heap) (i32.mul (memory.size) (i32.const 65536)))
        (then (drop (memory.grow (i32.add (i32.div_u (local.get 3) (i32.const 65536)) (i32.const 1))))))
      local.get $at)
    (func (export "tools") (result i32) i32.const {TOOLS_RET})
    (func (export "execute") (param $name i32) (param $name-len i32) (param $input i32) (param $input-len i32) (result i32)
      {execute})
    {extra})
  (core instance $i {instantiate})
  (alias core export $i "memory" (core memory $mem))
  (alias core export $i "cabi_realloc" (core func $realloc))
  (type $tools-type (func (result (list $tool-meta))))
  (func $tools (type $tools-type) (canon lift (core func $i "tools") (memory $mem)))
  (type $execute-type (func (param "name" string) (param "input-json" string)
    (result (result string (error $tool-error)))))
  (func $execute (type $execute-type)
    (canon lift (core func $i "execute") (memory $mem) (realloc $realloc)))
  (export "tools" (func $tools))
  (export "execute" (func $execute)))"#
        )
    }

    /// The component's binary, assembled once per process for each text (tests that build
    /// the same component share it).
    ///
    /// # Panics
    ///
    /// If the text is not valid (a mistake in the test).
    pub fn build(&self) -> Vec<u8> {
        assemble(self.text())
    }
}

/// A component (contract 0.1.0, one tool `slow`) whose core start function spins for as long
/// as it is let run when the plugin's environment has any variable, and returns at once
/// otherwise: its tool list loads quickly (listing tools runs a plugin with no grants), while
/// every instance made for a session (with the policy's `[env]`) starts slowly.
///
/// Its start function calls `wasi:cli/environment.get-environment`, lowered into a memory of a
/// module of its own (the main module imports that memory), the way toolchains link a shim.
pub fn start_gated_on_environment() -> Vec<u8> {
    const LIST: usize = 256;
    const STRINGS: usize = 1024;
    let strings = ["slow", "Starts slowly.", r#"{"type":"object"}"#, "started"];
    let mut memory = vec![0u8; 2048];
    let mut at = STRINGS;
    let mut places = Vec::new();
    for text in strings {
        memory[at..at + text.len()].copy_from_slice(text.as_bytes());
        places.push((at as u32, text.len() as u32));
        at += text.len();
    }
    let put = |memory: &mut Vec<u8>, at: usize, value: u32| {
        memory[at..at + 4].copy_from_slice(&value.to_le_bytes());
    };
    for (field, (ptr, len)) in places[..3].iter().enumerate() {
        put(&mut memory, LIST + field * 8, *ptr);
        put(&mut memory, LIST + field * 8 + 4, *len);
    }
    put(&mut memory, TOOLS_RET, LIST as u32);
    put(&mut memory, TOOLS_RET + 4, 1);
    memory[EXECUTE_RET] = 0;
    put(&mut memory, EXECUTE_RET + 4, places[3].0);
    put(&mut memory, EXECUTE_RET + 8, places[3].1);
    let data: String = memory.iter().map(|b| format!("\\{b:02x}")).collect();
    let text = format!(
        r#"(component
  (import "wasi:cli/environment@0.2.0" (instance $env
    (export "get-environment" (func (result (list (tuple string string)))))))
  (import "llm-worker:tool/types@0.1.0" (instance $types
    (type $meta (record (field "name" string) (field "description" string) (field "input-schema" string)))
    (export "tool-meta" (type (eq $meta)))
    (type $err (variant (case "invalid-argument" string) (case "execution-failed" string) (case "internal" string)))
    (export "tool-error" (type (eq $err)))))
  (alias export $types "tool-meta" (type $tool-meta))
  (alias export $types "tool-error" (type $tool-error))
  (core module $shim
    (memory (export "memory") 2)
    (global $heap (mut i32) (i32.const 65536))
    (func (export "realloc") (param i32 i32 i32 i32) (result i32)
      (local $at i32)
      (local.set $at (i32.and (i32.add (global.get $heap) (i32.const 7)) (i32.const -8)))
      (global.set $heap (i32.add (local.get $at) (local.get 3)))
      (if (i32.gt_u (global.get $heap) (i32.mul (memory.size) (i32.const 65536)))
        (then (drop (memory.grow (i32.add (i32.div_u (local.get 3) (i32.const 65536)) (i32.const 1))))))
      (local.get $at)))
  (core instance $shim-instance (instantiate $shim))
  (alias core export $shim-instance "memory" (core memory $mem))
  (alias core export $shim-instance "realloc" (core func $realloc))
  (alias export $env "get-environment" (func $get-environment))
  (core func $getenv (canon lower (func $get-environment) (memory $mem) (realloc $realloc)))
  (core module $main
    (import "host" "memory" (memory 1))
    (import "host" "getenv" (func $getenv (param i32)))
    (data (i32.const 0) "{data}")
    (func $start
      (call $getenv (i32.const 8))
      ;; any variable at all: spin until stopped
      (if (i32.ne (i32.load (i32.const 12)) (i32.const 0))
        (then (loop $spin (br $spin)))))
    (start $start)
    (func (export "tools") (result i32) i32.const {TOOLS_RET})
    (func (export "execute") (param i32 i32 i32 i32) (result i32) i32.const {EXECUTE_RET}))
  (core instance $i (instantiate $main
    (with "host" (instance (export "memory" (memory $mem)) (export "getenv" (func $getenv))))))
  (type $tools-type (func (result (list $tool-meta))))
  (func $tools (type $tools-type) (canon lift (core func $i "tools") (memory $mem)))
  (type $execute-type (func (param "name" string) (param "input-json" string)
    (result (result string (error $tool-error)))))
  (func $execute (type $execute-type)
    (canon lift (core func $i "execute") (memory $mem) (realloc $realloc)))
  (export "tools" (func $tools))
  (export "execute" (func $execute)))"#
    );
    assemble(text)
}

/// The binary of the component `text`, assembled once per process.
///
/// # Panics
///
/// If the text is not valid (a mistake in the test).
fn assemble(text: String) -> Vec<u8> {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock, PoisonError};
    static BUILT: OnceLock<Mutex<HashMap<String, Vec<u8>>>> = OnceLock::new();
    let built = BUILT.get_or_init(Default::default);
    if let Some(bytes) = built
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&text)
    {
        return bytes.clone();
    }
    let bytes = wat::parse_str(&text).unwrap_or_else(|e| panic!("{e}"));
    built
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(text, bytes.clone());
    bytes
}
