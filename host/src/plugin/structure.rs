//! How many instances one instantiation of a component makes, read from its bytes before it
//! is compiled.
//!
//! wasmtime flattens a component's nested components when it compiles it: every component
//! instantiated inside another is copied in, as often as it is instantiated. A file of a few
//! hundred bytes nesting forty components, each instantiating the one before twice, would make
//! wasmtime expand 2⁴⁰ instances while compiling, until the process ran out of memory.
//! wasmparser's limits are per component, and the host's limit on core instances
//! ([`MAX_CORE_INSTANCES`]) applies only once an instance is made, after compiling. So the
//! instances a component makes are counted here first, through its nesting, and a component
//! that would make more than an instance may hold is refused before it is compiled, as is one
//! whose count cannot be told from its bytes.

use wasmtime::wasmparser::{
    ComponentAlias, ComponentExternalKind, ComponentInstance, ComponentOuterAliasKind,
    ComponentTypeRef, Instance, Parser, Payload,
};

use super::instance::MAX_CORE_INSTANCES;

/// The most component instances one instantiation of a plugin may make (besides the plugin
/// itself): toolchains make none, compositions of a few components a few.
pub(crate) const MAX_COMPONENT_INSTANCES: u64 = 16;

/// What instantiating a component makes, counted through its nesting (saturating).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Made {
    /// Core module instances.
    pub(crate) core: u64,
    /// Component instances, nested ones included.
    pub(crate) components: u64,
}

impl Made {
    fn add(self, other: Self) -> Self {
        Self {
            core: self.core.saturating_add(other.core),
            components: self.components.saturating_add(other.components),
        }
    }
}

/// One component (or core module) being read, with what its component index space holds.
struct Frame {
    /// A core module: its sections are passed over.
    module: bool,
    /// What instantiating each component of its index space makes, in index order; `None`
    /// where it is not known here (imported, or exported by an instance).
    components: Vec<Option<Made>>,
    /// What instantiating this component makes, so far.
    made: Made,
}

impl Frame {
    fn new(module: bool) -> Self {
        Self {
            module,
            components: Vec::new(),
            made: Made::default(),
        }
    }
}

/// The most entries a component's index space of components may hold here (wasmparser's own
/// limit, which it applies only when validating, after this count): so that the count's
/// memory stays in proportion to what a plugin may be.
const MAX_COMPONENTS: usize = 1_000;

/// What one instantiation of the component `bytes` makes, counted before compiling it.
///
/// Only components the file defines (nested, or reached by an outer alias) may be
/// instantiated: a component taken from an import or from an instance's exports is one whose
/// cost is known only where its instance was made, with the arguments given there (which is
/// how wasmtime lays it out), and no toolchain makes such a plugin; it is refused.
///
/// # Errors
/// Why the component is refused: bytes the parser cannot read, a component instantiated that
/// the file does not define where it is instantiated, more than 1,000 components in one
/// index space.
pub(crate) fn instances_made(bytes: &[u8]) -> Result<Made, String> {
    let mut stack = vec![Frame::new(false)];
    for payload in Parser::new(0).parse_all(bytes) {
        let payload = payload.map_err(|e| format!("it cannot be read: {e}"))?;
        if stack
            .last()
            .is_some_and(|frame| frame.components.len() > MAX_COMPONENTS)
        {
            return Err(format!(
                "one of its components has more than {MAX_COMPONENTS} components in its index \
                 space"
            ));
        }
        let Some(frame) = stack.last_mut() else {
            break;
        };
        if frame.module {
            if let Payload::End(_) = payload {
                stack.pop();
            }
            continue;
        }
        match payload {
            Payload::ModuleSection { .. } => stack.push(Frame::new(true)),
            Payload::ComponentSection { .. } => stack.push(Frame::new(false)),
            Payload::End(_) => {
                let Some(done) = stack.pop() else {
                    break;
                };
                match stack.last_mut() {
                    // A nested component's definition: an entry of its parent's index space.
                    Some(parent) => parent.components.push(Some(done.made)),
                    None => return Ok(done.made),
                }
            }
            Payload::InstanceSection(instances) => {
                for instance in instances {
                    if let Instance::Instantiate { .. } = instance.map_err(|e| e.to_string())? {
                        frame.made.core = frame.made.core.saturating_add(1);
                    }
                }
            }
            Payload::ComponentInstanceSection(instances) => {
                for instance in instances {
                    if let ComponentInstance::Instantiate {
                        component_index, ..
                    } = instance.map_err(|e| e.to_string())?
                    {
                        let Some(made) = index(&frame.components, component_index) else {
                            return Err(format!(
                                "it instantiates component {component_index} of one of its \
                                 components, which is not one the file defines there (it is \
                                 imported, or taken from an instance's exports): how many \
                                 instances that makes cannot be counted before compiling"
                            ));
                        };
                        frame.made = frame.made.add(made).add(Made {
                            core: 0,
                            components: 1,
                        });
                    }
                }
            }
            Payload::ComponentImportSection(imports) => {
                for import in imports {
                    if let ComponentTypeRef::Component(_) = import.map_err(|e| e.to_string())?.ty {
                        frame.components.push(None);
                    }
                }
            }
            Payload::ComponentExportSection(exports) => {
                for export in exports {
                    let export = export.map_err(|e| e.to_string())?;
                    if export.kind == ComponentExternalKind::Component {
                        let made = index(&frame.components, export.index);
                        frame.components.push(made);
                    }
                }
            }
            Payload::ComponentAliasSection(aliases) => {
                for alias in aliases {
                    match alias.map_err(|e| e.to_string())? {
                        ComponentAlias::InstanceExport {
                            kind: ComponentExternalKind::Component,
                            ..
                        } => {
                            // Whichever component the instance exports: not known here.
                            let Some(frame) = stack.last_mut() else {
                                break;
                            };
                            frame.components.push(None);
                        }
                        ComponentAlias::Outer {
                            kind: ComponentOuterAliasKind::Component,
                            count,
                            index: outer_index,
                        } => {
                            let outer = usize::try_from(count)
                                .ok()
                                .and_then(|count| stack.len().checked_sub(count + 1))
                                .and_then(|at| stack.get(at))
                                .and_then(|outer| index(&outer.components, outer_index));
                            if let Some(frame) = stack.last_mut() {
                                frame.components.push(outer);
                            }
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Err("the component ends before its last section".into())
}

/// The entry `at` of a component index space (`None` when not known, or out of range).
fn index(components: &[Option<Made>], at: u32) -> Option<Made> {
    usize::try_from(at)
        .ok()
        .and_then(|at| components.get(at).copied().flatten())
}

/// Why the component `bytes` may not be compiled as a plugin, if it may not: what one
/// instantiation of it makes, or why that cannot be counted.
pub(crate) fn refusal_of(bytes: &[u8]) -> Option<String> {
    instances_made(bytes).map_or_else(Some, refusal)
}

/// Why a component making `made` instances may not be a plugin, if it may not.
pub(crate) fn refusal(made: Made) -> Option<String> {
    let core_limit = MAX_CORE_INSTANCES as u64;
    if made.core > core_limit {
        return Some(format!(
            "one instantiation of it would make {} core instances, past the host's instance \
             count of {core_limit} (toolchains make fewer than ten); it was not compiled: a \
             component nesting components that instantiate each other several times makes \
             exponentially many, each of which wasmtime would lay out while compiling",
            shown(made.core)
        ));
    }
    if made.components > MAX_COMPONENT_INSTANCES {
        return Some(format!(
            "one instantiation of it would make {} nested component instances, past the \
             host's limit of {MAX_COMPONENT_INSTANCES} (toolchains make none, compositions a \
             few); it was not compiled",
            shown(made.components)
        ));
    }
    None
}

/// A count, saturated ones said as such.
fn shown(count: u64) -> String {
    if count == u64::MAX {
        "more than 18446744073709551614".into()
    } else {
        count.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A component nesting `depth` components, each instantiating the one before `fan` times
    /// (through an outer alias), the innermost instantiating one empty core module.
    fn nested(depth: usize, fan: usize) -> Vec<u8> {
        let mut text = String::from(
            "(component $root\n (component $c0 (core module $m) (core instance (instantiate $m)))\n",
        );
        for level in 1..=depth {
            text.push_str(&format!(
                " (component $c{level} (alias outer $root $c{} (component $x))",
                level - 1
            ));
            for _ in 0..fan {
                text.push_str(" (instance (instantiate $x))");
            }
            text.push_str(")\n");
        }
        text.push_str(&format!(" (instance (instantiate $c{depth}))\n)"));
        wat::parse_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
    }

    #[test]
    fn nested_instantiations_multiply() {
        let made = instances_made(&nested(3, 2)).expect("reads");
        assert_eq!(
            made,
            Made {
                core: 8,
                // 1 (c3) + 2 (c2) + 4 (c1) + 8 (c0).
                components: 15,
            }
        );
        assert!(refusal(made).is_none());
        let made = instances_made(&nested(40, 2)).expect("reads");
        assert_eq!(made.core, 1 << 40);
        let refused = refusal(made).expect("refused");
        assert!(
            refused.contains("1099511627776 core instances"),
            "{refused}"
        );
        // Saturates rather than wrapping round to a small count.
        let made = instances_made(&nested(70, 2)).expect("reads");
        assert_eq!(made.core, u64::MAX);
        assert!(refusal(made).is_some());
    }

    #[test]
    fn a_component_taken_from_an_import_is_not_instantiated() {
        // $inner imports a component and instantiates it; the root passes $big to it. Where
        // $inner is read, what it will be given is not known (the bomb `$c40` could be given,
        // defined after it): refused, whatever the order.
        let text = r#"(component
            (component $big
                (core module $m)
                (core instance (instantiate $m)) (core instance (instantiate $m)))
            (component $inner
                (import "c" (component $c))
                (instance (instantiate $c)))
            (instance (instantiate $inner (with "c" (component $big)))))"#;
        let refused = instances_made(&wat::parse_str(text).expect("parses")).expect_err("refused");
        assert!(refused.contains("not one the file defines"), "{refused}");
        // Passing a component on without instantiating it is fine.
        let passed = r#"(component
            (component $big (core module $m) (core instance (instantiate $m)))
            (component $inner (import "c" (component $c)))
            (instance (instantiate $inner (with "c" (component $big)))))"#;
        let made = instances_made(&wat::parse_str(passed).expect("parses")).expect("counted");
        assert_eq!(
            made,
            Made {
                core: 0,
                components: 1
            }
        );
    }

    #[test]
    fn index_spaces_are_bounded_before_validation() {
        let mut text = String::from("(component $root (component $c)\n (component $n\n");
        for _ in 0..1_100 {
            text.push_str("  (alias outer $root $c (component))\n");
        }
        text.push_str(" )\n)");
        let refused = instances_made(&wat::parse_str(&text).expect("parses")).expect_err("refused");
        assert!(refused.contains("more than 1000 components"), "{refused}");
        assert!(instances_made(b"\0asm\x0d\0\x01\0\xff").is_err());
    }

    #[test]
    fn a_flat_component_counts_its_own_instantiations() {
        let text = r#"(component
            (core module $m (func (export "f")))
            (core instance $a (instantiate $m))
            (core instance $b (instantiate $m))
            (core instance (export "g" (func $a "f"))))"#;
        let made = instances_made(&wat::parse_str(text).expect("parses")).expect("reads");
        assert_eq!(made.core, 2);
        assert_eq!(made.components, 0);
    }
}
