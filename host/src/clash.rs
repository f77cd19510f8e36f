//! The one home of "two plugins offer the same name": what counts as a clash, and the two
//! ways it is settled. A directory loaded afresh refuses *both* plugins of a clash (neither
//! silently wins: [`mutual`]); a catalog being replaced while it serves keeps the one that
//! came first and leaves the later one out ([`Claims`]). Names are compared exactly; the key
//! is generic so that other namespaces (a resource URI, a prompt name) clash the same way.
//! Beside equal names, a fixed resource URI of one plugin that a template of another matches
//! is a clash too ([`uri_clash`]): a read of it would have two answers. So is a directory grant
//! of one plugin that lies in the way of another's read-write grant ([`grant_clash`]): the
//! other could put a link there and have it granted at the next load.

use std::collections::BTreeMap;

/// Names claimed so far, each by its first owner.
// Used by the MCP catalog only.
#[cfg_attr(not(feature = "mcp"), allow(dead_code))]
#[derive(Debug)]
pub(crate) struct Claims<K, O> {
    taken: BTreeMap<K, O>,
}

#[cfg_attr(not(feature = "mcp"), allow(dead_code))]
impl<K: Ord + Clone, O> Claims<K, O> {
    /// No claims yet.
    pub(crate) fn new() -> Self {
        Self {
            taken: BTreeMap::new(),
        }
    }

    /// The first of `names` that is claimed already, with its owner.
    pub(crate) fn first_taken<'n>(
        &self,
        names: impl IntoIterator<Item = &'n K>,
    ) -> Option<(&'n K, &O)>
    where
        K: 'n,
    {
        names
            .into_iter()
            .find_map(|name| self.taken.get(name).map(|owner| (name, owner)))
    }

    /// Claims each of `names` not claimed yet for `owner`.
    pub(crate) fn claim<'n>(&mut self, names: impl IntoIterator<Item = &'n K>, owner: O)
    where
        K: 'n,
        O: Clone,
    {
        for name in names {
            self.taken
                .entry(name.clone())
                .or_insert_with(|| owner.clone());
        }
    }
}

/// For each owner (by its place in `lists`), the first of its names that another owner
/// offers too, and the first such other owner; `None` for owners that clash with no one.
pub(crate) fn mutual<K: Ord + Clone>(lists: &[Vec<K>]) -> Vec<Option<(K, usize)>> {
    let mut owners: BTreeMap<&K, Vec<usize>> = BTreeMap::new();
    for (owner, names) in lists.iter().enumerate() {
        for name in names {
            let list = owners.entry(name).or_default();
            if list.last() != Some(&owner) {
                list.push(owner);
            }
        }
    }
    lists
        .iter()
        .enumerate()
        .map(|(owner, names)| {
            names.iter().find_map(|name| {
                let other = owners[name].iter().copied().find(|&other| other != owner)?;
                Some((name.clone(), other))
            })
        })
        .collect()
}

/// The fixed resource URI of one of `a` and `b` that a template of the other matches, or a
/// template of `a` that some URI could match together with one of `b`'s, if any: a read of
/// such a URI would have two answers.
pub(crate) fn uri_clash<'p>(
    a: &'p crate::LoadedPlugin,
    b: &'p crate::LoadedPlugin,
) -> Option<&'p str> {
    a.resource_claimed_by(b)
        .or_else(|| b.resource_claimed_by(a))
        .or_else(|| a.template_overlapping(b))
}

/// The ways to a plugin's directory grants: for each grant, by index, each of its paths (as
/// resolved, as given) with the real paths of the directories on the way to it, the granted
/// directory itself left out (`None` where one cannot be resolved).
pub(crate) struct GrantWays(Vec<(usize, std::path::PathBuf, Option<Vec<std::path::PathBuf>>)>);

impl GrantWays {
    /// The ways to `plugin`'s grants, worked out once (each a few `canonicalize` calls).
    pub(crate) fn of(plugin: &crate::LoadedPlugin) -> Self {
        let policy = plugin.policy();
        let ways = (0..policy.dirs.len())
            .flat_map(|index| {
                policy.grant_paths(index).into_iter().map(move |path| {
                    let mut way = crate::file::on_the_way(path);
                    if let Some(way) = &mut way {
                        way.pop();
                    }
                    // And every directory its links lead through: a link in another's
                    // read-write directory, reached from a link of neither, is a way too.
                    let way = way
                        .zip(crate::file::looked_up_in(path))
                        .map(|(mut way, looked)| {
                            way.extend(looked);
                            way
                        });
                    (index, path.to_owned(), way)
                })
            })
            .collect();
        Self(ways)
    }
}

/// A directory grant of a plugin (the ways to its grants: `ways`) that `other` could
/// redirect: a directory on the way to it lies in one of `other`'s read-write grants, where
/// `other` could rename it and put a link in its place, which a later load would grant the
/// plugin. The index of the grant and why, said for the operator.
pub(crate) fn grant_clash(
    ways: &GrantWays,
    other: &crate::LoadedPlugin,
) -> Option<(usize, String)> {
    let writable: Vec<&std::path::Path> = other
        .policy()
        .dirs
        .iter()
        .filter(|grant| grant.writable)
        .map(|grant| grant.host.as_path())
        .collect();
    if writable.is_empty() {
        return None;
    }
    ways.0.iter().find_map(|(index, path, way)| {
        let reached = match way {
            Some(way) => way
                .iter()
                .find_map(|dir| writable.iter().find(|outer| dir.starts_with(outer))),
            // Where it leads cannot be told: it cannot be shown safe.
            None => writable.first(),
        }?;
        Some((
            *index,
            format!(
                "is {}, reached through {}, a read-write directory of plugin {}: that plugin \
                 could put a link to any directory in its way, which a later load would grant \
                 this one; grant directories that do not lie in one another's read-write \
                 grants",
                path.display(),
                reached.display(),
                other.path().display()
            ),
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_sides_of_a_clash_are_named_and_others_are_not() {
        let lists = vec![
            vec!["a", "b"],
            vec!["c"],
            vec!["b", "d"],
            vec!["d"],
            vec!["e", "e"],
        ];
        assert_eq!(
            mutual(&lists),
            vec![Some(("b", 2)), None, Some(("b", 0)), Some(("d", 2)), None]
        );
    }

    #[test]
    fn the_first_claim_wins() {
        let mut claims = Claims::new();
        claims.claim(&["x".to_owned(), "y".to_owned()], "first");
        assert_eq!(
            claims.first_taken(&["z".to_owned(), "y".to_owned()]),
            Some((&"y".to_owned(), &"first"))
        );
        claims.claim(&["y".to_owned(), "z".to_owned()], "second");
        assert_eq!(
            claims.first_taken(&["y".to_owned()]).map(|(_, o)| *o),
            Some("first")
        );
        assert_eq!(
            claims.first_taken(&["z".to_owned()]).map(|(_, o)| *o),
            Some("second")
        );
        assert_eq!(claims.first_taken(&["w".to_owned()]), None);
    }
}
