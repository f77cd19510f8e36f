//! The distribution API's requests: manifests and blobs read with size caps (blobs checked
//! against their digest), blobs uploaded monolithically and manifests written.

use reqwest::StatusCode;
use reqwest::header::{CONTENT_TYPE, LOCATION};

use super::response::{expect_success, read_capped};
use super::{Fetched, MAX_INDEX_BYTES, MAX_MANIFEST_BYTES, RegistryClient};
use crate::registry::RegistryError;

impl RegistryClient {
    /// GETs the manifest at `reference` (a tag or a digest), at most [`MAX_MANIFEST_BYTES`]
    /// ([`MAX_INDEX_BYTES`] when an index is what `accept` asks for alone); `None` if the
    /// registry has none.
    pub(crate) async fn manifest(
        &self,
        reference: &str,
        accept: &str,
    ) -> Result<Option<Fetched>, RegistryError> {
        let limit = if accept == crate::registry::OCI_INDEX_MEDIA_TYPE {
            MAX_INDEX_BYTES
        } else {
            MAX_MANIFEST_BYTES
        };
        let url = format!("{}/manifests/{reference}", self.base);
        let response = self
            .send(reqwest::Method::GET, &url, Some(accept), None, None)
            .await?;
        if response.status() == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let response = expect_success(response, &url).await?;
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .map(|value| value.split(';').next().unwrap_or(value).trim().to_owned());
        let bytes = read_capped(response, limit, &format!("the manifest {reference}"), "").await?;
        Ok(Some(Fetched {
            bytes,
            content_type,
        }))
    }

    /// GETs the referrers of `digest` (OCI 1.1's referrers API), at most
    /// [`MAX_INDEX_BYTES`]; `None` if the registry has no such API (distribution 2.8 answers
    /// 404), so that the referrers tag is read instead.
    pub(crate) async fn referrers(&self, digest: &str) -> Result<Option<Fetched>, RegistryError> {
        let url = format!("{}/referrers/{digest}", self.base);
        let response = self
            .send(
                reqwest::Method::GET,
                &url,
                Some(crate::registry::OCI_INDEX_MEDIA_TYPE),
                None,
                None,
            )
            .await?;
        let status = response.status();
        if status == StatusCode::NOT_FOUND || status == StatusCode::METHOD_NOT_ALLOWED {
            return Ok(None);
        }
        let response = expect_success(response, &url).await?;
        let bytes = read_capped(response, MAX_INDEX_BYTES, "the referrers index", "").await?;
        Ok(Some(Fetched {
            bytes,
            content_type: Some(crate::registry::OCI_INDEX_MEDIA_TYPE.to_owned()),
        }))
    }

    /// GETs the blob `digest`, at most `limit` bytes, and checks its digest.
    pub(crate) async fn blob(
        &self,
        digest: &str,
        limit: u64,
        what: &str,
        cap_hint: &str,
    ) -> Result<Vec<u8>, RegistryError> {
        // The digest comes from a manifest the registry sent: one that is not a digest would
        // make the request another path on the registry, carrying the puller's credentials.
        crate::registry::artifact::check_digest(digest).map_err(|reason| {
            RegistryError::Usage(format!(
                "{what}: {reason} (as the registry's manifest names it); nothing was fetched"
            ))
        })?;
        let url = format!("{}/blobs/{digest}", self.base);
        let response = self
            .send(reqwest::Method::GET, &url, None, None, None)
            .await?;
        let response = expect_success(response, &url).await?;
        let bytes = read_capped(response, limit, what, cap_hint).await?;
        let actual = format!("sha256:{}", crate::digest::sha256_hex(&bytes));
        if actual != digest {
            return Err(RegistryError::DigestMismatch {
                what: what.to_owned(),
                expected: digest.to_owned(),
                actual,
            });
        }
        Ok(bytes)
    }

    /// Uploads `bytes` as a blob (unless the registry has it), monolithically.
    pub(crate) async fn put_blob(&self, bytes: &[u8]) -> Result<String, RegistryError> {
        let digest = format!("sha256:{}", crate::digest::sha256_hex(bytes));
        let url = format!("{}/blobs/{digest}", self.base);
        let response = self
            .send(reqwest::Method::HEAD, &url, None, None, Some("push"))
            .await?;
        if response.status().is_success() {
            return Ok(digest);
        }
        let url = format!("{}/blobs/uploads/", self.base);
        let response = self
            .send(reqwest::Method::POST, &url, None, None, Some("push"))
            .await?;
        let response = expect_success(response, &url).await?;
        let location = response
            .headers()
            .get(LOCATION)
            .and_then(|value| value.to_str().ok())
            .ok_or_else(|| RegistryError::Status {
                url: url.clone(),
                status: response.status().as_u16(),
                detail: ": no Location for the upload".into(),
            })?;
        let upload = response
            .url()
            .join(location)
            .map_err(|error| RegistryError::Status {
                url: url.clone(),
                status: 202,
                detail: format!(": an upload Location that is not a URL ({error})"),
            })?;
        let mut upload = upload;
        upload.query_pairs_mut().append_pair("digest", &digest);
        let upload = upload.to_string();
        let response = self
            .send(
                reqwest::Method::PUT,
                &upload,
                None,
                Some(("application/octet-stream", bytes.to_vec())),
                Some("push"),
            )
            .await?;
        expect_success(response, &upload).await?;
        Ok(digest)
    }

    /// PUTs a manifest under `reference` (a tag); its digest.
    pub(crate) async fn put_manifest(
        &self,
        reference: &str,
        media_type: &str,
        bytes: Vec<u8>,
    ) -> Result<String, RegistryError> {
        let digest = format!("sha256:{}", crate::digest::sha256_hex(&bytes));
        let url = format!("{}/manifests/{reference}", self.base);
        let response = self
            .send(
                reqwest::Method::PUT,
                &url,
                None,
                Some((media_type, bytes)),
                Some("push"),
            )
            .await?;
        expect_success(response, &url).await?;
        Ok(digest)
    }
}
