//! Pushing a plugin as a Wasm artifact, and signing it as cosign does.

use super::{
    Descriptor, Manifest, OCI_MANIFEST_MEDIA_TYPE, Reference, RegistryClient, RegistryError,
    SIGNATURE_ANNOTATION, SIMPLE_SIGNING_MEDIA_TYPE, SigningKey, WASM_CONFIG_MEDIA_TYPE,
    WASM_LAYER_MEDIA_TYPE, artifact, payload, signature_tag, wasm_config,
};

/// What [`push`] did.
#[derive(Debug, Clone)]
pub struct Pushed {
    /// The digest of the manifest pushed.
    pub manifest_digest: String,
    /// The tag the signature was stored under, if signed.
    pub signature_tag: Option<String>,
}

/// Pushes `component` (a plugin's bytes) to `reference` (which needs a tag) as a Wasm
/// artifact whose config lists `imports`, and with `key` signs it as cosign does (appending
/// to the signatures already there).
pub async fn push(
    client: &RegistryClient,
    reference: &Reference,
    component: &[u8],
    imports: &[String],
    key: Option<&SigningKey>,
) -> Result<Pushed, RegistryError> {
    let Some(tag) = reference
        .tag
        .as_deref()
        .filter(|_| reference.digest.is_none())
    else {
        return Err(RegistryError::Usage(format!(
            "{reference}: a push needs a tag (REGISTRY/REPOSITORY:TAG), not a digest"
        )));
    };
    let layer = Descriptor::of(WASM_LAYER_MEDIA_TYPE, component);
    let config = wasm_config(&layer.digest, imports);
    client.put_blob(component).await?;
    client.put_blob(&config).await?;
    let mut manifest = Manifest::new(Descriptor::of(WASM_CONFIG_MEDIA_TYPE, &config), vec![layer]);
    manifest.artifact_type = Some(WASM_CONFIG_MEDIA_TYPE.to_owned());
    let manifest_digest = client
        .put_manifest(tag, OCI_MANIFEST_MEDIA_TYPE, manifest.to_bytes())
        .await?;
    let Some(key) = key else {
        return Ok(Pushed {
            manifest_digest,
            signature_tag: None,
        });
    };
    let payload = payload(&reference.name(), &manifest_digest);
    let signature = key.sign(&payload);
    client.put_blob(&payload).await?;
    let mut layer = Descriptor::of(SIMPLE_SIGNING_MEDIA_TYPE, &payload);
    layer.annotations = Some([(SIGNATURE_ANNOTATION.to_owned(), signature)].into());
    let signature_tag = signature_tag(&manifest_digest);
    // Signatures already there (other signers) are kept, as cosign keeps them.
    let mut layers: Vec<Descriptor> = match client
        .manifest(&signature_tag, OCI_MANIFEST_MEDIA_TYPE)
        .await?
    {
        Some(fetched) => Manifest::parse(&fetched.bytes, fetched.content_type.as_deref())
            .map(|existing| existing.layers)
            .unwrap_or_default(),
        None => Vec::new(),
    };
    layers.retain(|existing| existing.digest != layer.digest);
    layers.push(layer);
    let diff_ids: Vec<&str> = layers.iter().map(|l| l.digest.as_str()).collect();
    let config = serde_json::json!({
        "architecture": "",
        "os": "",
        "config": {},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    })
    .to_string()
    .into_bytes();
    client.put_blob(&config).await?;
    let signatures = Manifest::new(
        Descriptor::of(artifact::OCI_CONFIG_MEDIA_TYPE, &config),
        layers,
    );
    client
        .put_manifest(
            &signature_tag,
            OCI_MANIFEST_MEDIA_TYPE,
            signatures.to_bytes(),
        )
        .await?;
    Ok(Pushed {
        manifest_digest,
        signature_tag: Some(signature_tag),
    })
}
