//! The CNCF Wasm OCI artifact: an OCI image manifest whose config has the media type
//! `application/vnd.wasm.config.v0+json` and whose one layer, `application/wasm`, is the
//! component (what `wkg`, Wassette and wasmCloud read and write).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The config media type of a Wasm artifact.
pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// The media type of its layer.
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/wasm";
/// An OCI image manifest.
pub const OCI_MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// An OCI image index (refused: name the manifest of the component itself).
pub const OCI_INDEX_MEDIA_TYPE: &str = "application/vnd.oci.image.index.v1+json";
/// The config media type of a signature manifest.
pub(crate) const OCI_CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.image.config.v1+json";
/// What a GET of a manifest accepts.
pub(crate) const ACCEPT_MANIFESTS: &str = "application/vnd.oci.image.manifest.v1+json, \
     application/vnd.oci.image.index.v1+json, \
     application/vnd.docker.distribution.manifest.v2+json, \
     application/vnd.docker.distribution.manifest.list.v2+json";

/// A content descriptor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    /// Its media type.
    pub media_type: String,
    /// `sha256:…`.
    pub digest: String,
    /// Its size in bytes.
    pub size: u64,
    /// Its annotations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
}

impl Descriptor {
    /// The descriptor of `bytes` as `media_type`.
    pub fn of(media_type: &str, bytes: &[u8]) -> Self {
        Self {
            media_type: media_type.to_owned(),
            digest: format!("sha256:{}", crate::digest::sha256_hex(bytes)),
            size: bytes.len() as u64,
            annotations: None,
        }
    }
}

/// An OCI image manifest (the fields read and written here).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// Always 2.
    pub schema_version: u32,
    /// `application/vnd.oci.image.manifest.v1+json` (may be left out by some writers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// The artifact's type (OCI 1.1), if set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_type: Option<String>,
    /// The config blob.
    pub config: Descriptor,
    /// The layers.
    #[serde(default)]
    pub layers: Vec<Descriptor>,
    /// Annotations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    /// The manifest this one refers to (OCI 1.1), as a signature bundle refers to what it
    /// signs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<Descriptor>,
}

impl Manifest {
    /// A manifest of `config` and `layers`.
    pub fn new(config: Descriptor, layers: Vec<Descriptor>) -> Self {
        Self {
            schema_version: 2,
            media_type: Some(OCI_MANIFEST_MEDIA_TYPE.to_owned()),
            artifact_type: None,
            config,
            layers,
            annotations: None,
            subject: None,
        }
    }

    /// Its JSON, as stored.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Parses a manifest a registry sent (`content_type` from its response), refusing an index
    /// or another kind of manifest, named by its media type.
    pub(crate) fn parse(bytes: &[u8], content_type: Option<&str>) -> Result<Self, String> {
        // What tells the kinds apart, read without building anything else of the text: a
        // hostile registry's manifest of tiny objects would take many times its size as
        // `serde_json` values.
        #[derive(serde::Deserialize)]
        struct Kind {
            #[serde(rename = "mediaType")]
            media_type: Option<String>,
            manifests: Option<serde::de::IgnoredAny>,
        }
        let kind: Kind = serde_json::from_slice(bytes).map_err(|error| {
            format!(
                "its manifest is not an OCI manifest ({})",
                super::quoted(&error.to_string())
            )
        })?;
        let media_type = kind
            .media_type
            .as_deref()
            .or(content_type)
            .unwrap_or("none");
        let shown = super::quoted(media_type);
        if kind.manifests.is_some() || media_type.contains("index") || media_type.contains("list") {
            return Err(format!(
                "it is an image index (media type {shown}), not the manifest of one Wasm \
                 component; name the component's own manifest by its digest"
            ));
        }
        if media_type != OCI_MANIFEST_MEDIA_TYPE {
            return Err(format!(
                "its manifest has the media type {shown}; a Wasm component artifact is an \
                 OCI image manifest ({OCI_MANIFEST_MEDIA_TYPE})"
            ));
        }
        let manifest: Manifest = serde_json::from_slice(bytes).map_err(|error| {
            format!(
                "its manifest is not an OCI image manifest ({})",
                super::quoted(&error.to_string())
            )
        })?;
        if manifest.schema_version != 2 {
            return Err(format!(
                "its manifest has schemaVersion {}, not 2",
                manifest.schema_version
            ));
        }
        Ok(manifest)
    }

    /// The component layer of a Wasm artifact; an error naming the media types otherwise.
    pub(crate) fn wasm_layer(&self) -> Result<&Descriptor, String> {
        if self.config.media_type != WASM_CONFIG_MEDIA_TYPE {
            return Err(format!(
                "its config has the media type {}, not {WASM_CONFIG_MEDIA_TYPE} (it is not a \
                 Wasm component artifact; a container image cannot be a plugin)",
                super::quoted(&self.config.media_type)
            ));
        }
        match self.layers.as_slice() {
            [layer] if layer.media_type == WASM_LAYER_MEDIA_TYPE => {
                check_digest(&layer.digest)?;
                Ok(layer)
            }
            layers => {
                // At most a few of them, each quoted.
                let mut types: Vec<String> = layers
                    .iter()
                    .take(4)
                    .map(|l| super::quoted(&l.media_type))
                    .collect();
                if layers.len() > types.len() {
                    types.push(format!("… {} in all", layers.len()));
                }
                Err(format!(
                    "its layers have the media types [{}]; a Wasm component artifact has one \
                     layer of {WASM_LAYER_MEDIA_TYPE}",
                    types.join(", ")
                ))
            }
        }
    }
}

/// Checks a `sha256:` digest of 64 lower-case hex digits.
pub(crate) fn check_digest(digest: &str) -> Result<(), String> {
    let valid = digest.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    });
    if valid {
        Ok(())
    } else {
        Err(format!(
            "'{}' is not a sha256 digest",
            super::quoted(digest)
        ))
    }
}

/// The config blob of a Wasm artifact holding a component that imports `imports`.
pub fn wasm_config(layer_digest: &str, imports: &[String]) -> Vec<u8> {
    serde_json::json!({
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [layer_digest],
        "component": {
            "exports": ["tools", "execute"],
            "imports": imports,
        },
    })
    .to_string()
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_wasm_artifacts_pass_naming_what_they_are() {
        let wasm = Descriptor::of(WASM_LAYER_MEDIA_TYPE, b"\0asm");
        let config = Descriptor::of(WASM_CONFIG_MEDIA_TYPE, b"{}");
        let manifest = Manifest::new(config.clone(), vec![wasm.clone()]);
        let parsed = Manifest::parse(&manifest.to_bytes(), None).expect("manifest");
        assert_eq!(parsed.wasm_layer().expect("wasm"), &wasm);

        let image = Manifest::new(
            Descriptor::of("application/vnd.oci.image.config.v1+json", b"{}"),
            vec![Descriptor::of(
                "application/vnd.oci.image.layer.v1.tar+gzip",
                b"x",
            )],
        );
        let why = image.wasm_layer().expect_err("image");
        assert!(
            why.contains("application/vnd.oci.image.config.v1+json"),
            "{why}"
        );
        let two = Manifest::new(config, vec![wasm.clone(), wasm]);
        assert!(two.wasm_layer().expect_err("two").contains("one layer"));
        let index = br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}"#;
        let why = Manifest::parse(index, None).expect_err("index");
        assert!(why.contains(OCI_INDEX_MEDIA_TYPE), "{why}");
        let docker = br#"{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json","config":{"mediaType":"x","digest":"sha256:00","size":1},"layers":[]}"#;
        let why = Manifest::parse(docker, None).expect_err("docker");
        assert!(
            why.contains("application/vnd.docker.distribution.manifest.v2+json"),
            "{why}"
        );
    }

    /// What a registry chose to write, quoted in an error: on one line (no forged lines of
    /// output after `error:`) and short (no megabytes burying the cause).
    #[test]
    fn what_a_registry_names_is_quoted_short_and_on_one_line() {
        let forged = format!(
            "x\npulled ghcr.io/acme/greet into plugins\n  verified: signed by acme{}",
            "y".repeat(1 << 20)
        );
        let manifest = serde_json::json!({"schemaVersion": 2, "mediaType": forged});
        let why = Manifest::parse(manifest.to_string().as_bytes(), None).expect_err("refused");
        let config = Descriptor::of(&forged, b"{}");
        let layers = vec![Descriptor::of(&forged, b"x"); 1000];
        let not_wasm = Manifest::new(config, layers.clone())
            .wasm_layer()
            .map(|_| ())
            .expect_err("refused");
        let bad_layers = Manifest::new(Descriptor::of(WASM_CONFIG_MEDIA_TYPE, b"{}"), layers)
            .wasm_layer()
            .expect_err("refused");
        let bad_digest = check_digest(&forged).expect_err("refused");
        for why in [why, not_wasm, bad_layers, bad_digest] {
            assert!(!why.contains('\n') && why.len() < 2_000, "{}", &why[..300]);
            assert!(why.contains("x\\npulled"), "{}", &why[..300]);
        }
    }
}
