#!/usr/bin/env python3
"""An independent OCI client for the registry tests: pushes a file as an artifact with the
distribution API (python3's standard library only) and, with --sign, signs it the way cosign
does, with the `openssl` command (ECDSA P-256, SHA-256, DER, base64 in the
`dev.cosignproject.cosign/signature` annotation of a layer of the `sha256-<hex>.sig` manifest).
Nothing of llm-worker is used. Prints the manifest's digest."""

import argparse
import base64
import hashlib
import json
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request

MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def request(method, url, body=None, content_type=None):
    req = urllib.request.Request(url, data=body, method=method)
    if content_type:
        req.add_header("Content-Type", content_type)
    with urllib.request.urlopen(req, timeout=30) as response:
        return response.status, response.headers, response.read()


def digest_of(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def put_blob(base, repository, data):
    digest = digest_of(data)
    _, headers, _ = request("POST", f"{base}/v2/{repository}/blobs/uploads/")
    location = urllib.parse.urljoin(base, headers["Location"])
    separator = "&" if "?" in location else "?"
    request("PUT", f"{location}{separator}digest={digest}", data, "application/octet-stream")
    return {"mediaType": "", "digest": digest, "size": len(data)}


def put_manifest(base, repository, reference, manifest):
    data = json.dumps(manifest).encode()
    request("PUT", f"{base}/v2/{repository}/manifests/{reference}", data, MANIFEST)
    return digest_of(data)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--registry", required=True, help="host:port, spoken to over plain HTTP")
    parser.add_argument("--repository", required=True)
    parser.add_argument("--tag", required=True)
    parser.add_argument("--layer", required=True, help="the file to push as the one layer")
    parser.add_argument("--layer-type", default="application/wasm")
    parser.add_argument("--config-type", default="application/vnd.wasm.config.v0+json")
    parser.add_argument("--sign", help="a PEM private key of the curve P-256")
    parser.add_argument("--identity", help="the docker-reference the signature names")
    parser.add_argument("--padding", type=int, default=0,
                        help="add a member of this many tiny objects to the manifest (a hostile registry's)")
    args = parser.parse_args()
    base = f"http://{args.registry}"

    with open(args.layer, "rb") as file:
        component = file.read()
    layer = put_blob(base, args.repository, component)
    layer["mediaType"] = args.layer_type
    config = json.dumps({"architecture": "wasm", "os": "wasip2",
                         "layerDigests": [layer["digest"]]}).encode()
    config_descriptor = put_blob(base, args.repository, config)
    config_descriptor["mediaType"] = args.config_type
    manifest = {"schemaVersion": 2, "mediaType": MANIFEST,
                "config": config_descriptor, "layers": [layer]}
    if args.padding:
        manifest["padding"] = [{"": 0}] * args.padding
    digest = put_manifest(base, args.repository, args.tag, manifest)

    if args.sign:
        identity = args.identity or f"{args.registry}/{args.repository}"
        payload = json.dumps({"critical": {"identity": {"docker-reference": identity},
                                           "image": {"docker-manifest-digest": digest},
                                           "type": "cosign container image signature"},
                              "optional": None}).encode()
        with tempfile.NamedTemporaryFile() as payload_file:
            payload_file.write(payload)
            payload_file.flush()
            signature = subprocess.run(
                ["openssl", "dgst", "-sha256", "-sign", args.sign, payload_file.name],
                check=True, capture_output=True).stdout
        payload_layer = put_blob(base, args.repository, payload)
        payload_layer["mediaType"] = "application/vnd.dev.cosign.simplesigning.v1+json"
        payload_layer["annotations"] = {
            "dev.cosignproject.cosign/signature": base64.b64encode(signature).decode()}
        sig_config = json.dumps({"architecture": "", "os": "", "config": {},
                                 "rootfs": {"type": "layers",
                                            "diff_ids": [payload_layer["digest"]]}}).encode()
        sig_config_descriptor = put_blob(base, args.repository, sig_config)
        sig_config_descriptor["mediaType"] = "application/vnd.oci.image.config.v1+json"
        put_manifest(base, args.repository, digest.replace(":", "-") + ".sig",
                     {"schemaVersion": 2, "mediaType": MANIFEST,
                      "config": sig_config_descriptor, "layers": [payload_layer]})
    print(digest)


if __name__ == "__main__":
    sys.exit(main())
