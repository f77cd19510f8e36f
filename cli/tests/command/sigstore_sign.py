#!/usr/bin/env python3
"""A Sigstore authority for the tests, and keyless signatures it makes, without llm-worker.

It plays the parts of Fulcio (a root and an intermediate CA issuing short-lived certificates
for an OIDC identity, with an embedded SCT from a CT log), of Rekor (a log key signing entry
timestamps and checkpoints over a Merkle tree) and of cosign (a DSSE envelope holding an
in-toto statement whose subject is the manifest digest, as `cosign sign` writes since 3.0; or
the legacy `.sig` layout with certificate, chain and Rekor bundle annotations). Python's
`cryptography` does the cryptography; the formats are written here from their specifications
(RFC 6962, the Sigstore bundle and trusted-root protobuf specs, the C2SP signed note).

    sigstore_sign.py root DIR                  # DIR/trusted_root.json and DIR/authority/
    sigstore_sign.py sign DIR --digest D --repository R --identity I --issuer S --out F
    sigstore_sign.py attach --registry HOST:PORT --repository R --digest D --bundle F
    sigstore_sign.py attach-legacy --registry HOST:PORT --repository R --digest D --bundle F

`sign` takes variations that make a refused signature (`--expired`, `--subject-digest`,
`--tlog-for-digest`, `--tamper-proof`, `--pad`). Only the standard library and `cryptography`.
"""

import argparse
import base64
import datetime
import hashlib
import json
import os
import sys
import urllib.request

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

FULCIO_ARC = "1.3.6.1.4.1.57264.1."
SCT_LIST_OID = "1.3.6.1.4.1.11129.2.4.2"
BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
EMPTY_MEDIA_TYPE = "application/vnd.oci.empty.v1+json"
MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
INDEX_MEDIA_TYPE = "application/vnd.oci.image.index.v1+json"
SIMPLE_SIGNING = "application/vnd.dev.cosign.simplesigning.v1+json"
LOG_ORIGIN = "rekor.test - 1193050959916656506"


def b64(data):
    return base64.b64encode(data).decode()


def canonical(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def spki(key):
    return key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def der_utf8(text):
    data = text.encode()
    assert len(data) < 128
    return bytes([0x0C, len(data)]) + data


def der_octets(data):
    if len(data) < 128:
        return bytes([0x04, len(data)]) + data
    length = len(data).to_bytes((len(data).bit_length() + 7) // 8, "big")
    return bytes([0x04, 0x80 | len(length)]) + length + data


def save_key(path, key):
    with open(path, "wb") as f:
        f.write(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )


def load_key(path):
    with open(path, "rb") as f:
        return serialization.load_pem_private_key(f.read(), None)


def ca_certificate(key, subject, issuer_key, issuer_name, path_length, start):
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "llm-worker tests"),
                      x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer_name or name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + datetime.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=path_length), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    if issuer_name is not None:
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), critical=False
        )
    return builder.sign(issuer_key or key, hashes.SHA384())


def root(args):
    out = args.dir
    authority = os.path.join(out, "authority")
    os.makedirs(authority, exist_ok=True)
    start = datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc)
    root_key = ec.generate_private_key(ec.SECP384R1())
    root_cert = ca_certificate(root_key, "test root", None, None, 1, start)
    inter_key = ec.generate_private_key(ec.SECP384R1())
    inter_cert = ca_certificate(inter_key, "test intermediate", root_key, root_cert.subject, 0, start)
    if args.logs_from:
        rekor_key = load_key(os.path.join(args.logs_from, "authority", "rekor.pem"))
        ct_key = load_key(os.path.join(args.logs_from, "authority", "ct.pem"))
    else:
        rekor_key = ec.generate_private_key(ec.SECP256R1())
        ct_key = ec.generate_private_key(ec.SECP256R1())
    save_key(os.path.join(authority, "intermediate.pem"), inter_key)
    save_key(os.path.join(authority, "rekor.pem"), rekor_key)
    save_key(os.path.join(authority, "ct.pem"), ct_key)
    with open(os.path.join(authority, "intermediate.crt"), "wb") as f:
        f.write(inter_cert.public_bytes(serialization.Encoding.DER))
    with open(os.path.join(authority, "root.crt"), "wb") as f:
        f.write(root_cert.public_bytes(serialization.Encoding.DER))

    def log(key, url):
        der = spki(key)
        return {
            "baseUrl": url,
            "hashAlgorithm": "SHA2_256",
            "publicKey": {
                "rawBytes": b64(der),
                "keyDetails": "PKIX_ECDSA_P256_SHA_256",
                "validFor": {"start": "2020-01-01T00:00:00Z"},
            },
            "logId": {"keyId": b64(hashlib.sha256(der).digest())},
        }

    trusted = {
        "mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1",
        "tlogs": [log(rekor_key, "https://rekor.test")],
        "certificateAuthorities": [
            {
                "subject": {"organization": "llm-worker tests", "commonName": "test root"},
                "uri": "https://fulcio.test",
                "certChain": {
                    "certificates": [
                        {"rawBytes": b64(inter_cert.public_bytes(serialization.Encoding.DER))},
                        {"rawBytes": b64(root_cert.public_bytes(serialization.Encoding.DER))},
                    ]
                },
                "validFor": {"start": "2020-01-01T00:00:00Z"},
            }
        ],
        "ctlogs": [log(ct_key, "https://ct.test")],
        "timestampAuthorities": [],
    }
    with open(os.path.join(out, "trusted_root.json"), "w") as f:
        json.dump(trusted, f, indent=2)


def leaf_certificate(authority, signing_key, args, now):
    inter_key = load_key(os.path.join(authority, "intermediate.pem"))
    ct_key = load_key(os.path.join(authority, "ct.pem"))
    with open(os.path.join(authority, "intermediate.crt"), "rb") as f:
        inter_cert = x509.load_der_x509_certificate(f.read())
    if args.expired:
        start = now - datetime.timedelta(hours=2)
    else:
        start = now - datetime.timedelta(minutes=1)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([]))
        .issuer_name(inter_cert.subject)
        .public_key(signing_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + datetime.timedelta(minutes=10))
        .add_extension(
            x509.KeyUsage(True, False, False, False, False, False, False, False, False),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), critical=False)
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(signing_key.public_key()), critical=False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(inter_key.public_key()),
            critical=False,
        )
        .add_extension(
            x509.SubjectAlternativeName([x509.UniformResourceIdentifier(args.identity)]),
            critical=True,
        )
    )

    def claim(number, value, raw=False):
        nonlocal builder
        oid = x509.ObjectIdentifier(FULCIO_ARC + str(number))
        data = value.encode() if raw else der_utf8(value)
        builder = builder.add_extension(x509.UnrecognizedExtension(oid, data), critical=False)

    issuer = args.issuer_override or args.issuer
    claim(1, issuer, raw=True)
    claim(8, issuer)
    if args.source_repository:
        claim(12, args.source_repository)
    if args.ref:
        claim(14, args.ref)
    if args.repository_id:
        claim(15, args.repository_id)
    if args.owner_id:
        claim(17, args.owner_id)
    if args.trigger:
        claim(20, args.trigger)
    # The precertificate's TBS is the final one without the SCT list (RFC 6962 3.2).
    precert = builder.sign(inter_key, hashes.SHA384())
    tbs = precert.tbs_certificate_bytes
    timestamp = int(start.timestamp() * 1000) + 1000
    issuer_key_hash = hashlib.sha256(spki(inter_key)).digest()
    signed = (
        bytes([0, 0])
        + timestamp.to_bytes(8, "big")
        + (1).to_bytes(2, "big")
        + issuer_key_hash
        + len(tbs).to_bytes(3, "big")
        + tbs
        + (0).to_bytes(2, "big")
    )
    signature = ct_key.sign(signed, ec.ECDSA(hashes.SHA256()))
    sct = (
        bytes([0])
        + hashlib.sha256(spki(ct_key)).digest()
        + timestamp.to_bytes(8, "big")
        + (0).to_bytes(2, "big")
        + bytes([4, 3])
        + len(signature).to_bytes(2, "big")
        + signature
    )
    sct_list = (len(sct) + 2).to_bytes(2, "big") + len(sct).to_bytes(2, "big") + sct
    builder = builder.add_extension(
        x509.UnrecognizedExtension(x509.ObjectIdentifier(SCT_LIST_OID), der_octets(sct_list)),
        critical=False,
    )
    return builder.sign(inter_key, hashes.SHA384()), inter_cert


def merkle_leaf(data):
    return hashlib.sha256(b"\x00" + data).digest()


def merkle_node(left, right):
    return hashlib.sha256(b"\x01" + left + right).digest()


def merkle_root(leaves):
    if len(leaves) == 1:
        return leaves[0]
    split = 1
    while split * 2 < len(leaves):
        split *= 2
    return merkle_node(merkle_root(leaves[:split]), merkle_root(leaves[split:]))


def merkle_path(index, leaves):
    if len(leaves) == 1:
        return []
    split = 1
    while split * 2 < len(leaves):
        split *= 2
    if index < split:
        return merkle_path(index, leaves[:split]) + [merkle_root(leaves[split:])]
    return merkle_path(index - split, leaves[split:]) + [merkle_root(leaves[:split])]


def log_entry(authority, body, integrated_time, tamper_proof):
    rekor_key = load_key(os.path.join(authority, "rekor.pem"))
    log_id = hashlib.sha256(spki(rekor_key)).digest()
    # The entry sits at index 5 of a tree of 7, the other leaves someone else's.
    index, size = 5, 7
    leaves = [merkle_leaf(b"entry %d" % i) for i in range(size)]
    leaves[index] = merkle_leaf(body)
    root_hash = merkle_root(leaves)
    path = merkle_path(index, leaves)
    if tamper_proof:
        path[0] = bytes([path[0][0] ^ 1]) + path[0][1:]
    note = f"{LOG_ORIGIN}\n{size}\n{b64(root_hash)}\n"
    note_signature = rekor_key.sign(note.encode(), ec.ECDSA(hashes.SHA256()))
    checkpoint = note + "\n\u2014 rekor.test " + b64(log_id[:4] + note_signature) + "\n"
    promise = canonical(
        {
            "body": b64(body),
            "integratedTime": integrated_time,
            "logID": log_id.hex(),
            "logIndex": index,
        }
    )
    kind = json.loads(body)
    return {
        "logIndex": str(index),
        "logId": {"keyId": b64(log_id)},
        "kindVersion": {"kind": kind["kind"], "version": kind["apiVersion"]},
        "integratedTime": str(integrated_time),
        "inclusionPromise": {
            "signedEntryTimestamp": b64(rekor_key.sign(promise, ec.ECDSA(hashes.SHA256())))
        },
        "inclusionProof": {
            "logIndex": str(index),
            "rootHash": b64(root_hash),
            "treeSize": str(size),
            "hashes": [b64(h) for h in path],
            "checkpoint": {"envelope": checkpoint},
        },
        "canonicalizedBody": b64(body),
    }


def statement(repository, digest, predicate_type="https://sigstore.dev/cosign/sign/v1"):
    return canonical(
        {
            "_type": "https://in-toto.io/Statement/v1",
            "subject": [{"name": repository, "digest": {"sha256": digest.split(":", 1)[1]}}],
            "predicateType": predicate_type,
            "predicate": {},
        }
    )


def pae(payload_type, payload):
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def sign(args):
    authority = os.path.join(args.dir, "authority")
    now = datetime.datetime.now(datetime.timezone.utc)
    signing_key = ec.generate_private_key(ec.SECP256R1())
    leaf, intermediate = leaf_certificate(authority, signing_key, args, now)
    leaf_pem = leaf.public_bytes(serialization.Encoding.PEM)
    integrated_time = int(now.timestamp())
    if args.format == "legacy":
        payload = canonical(
            {
                "critical": {
                    "identity": {"docker-reference": args.repository},
                    "image": {"docker-manifest-digest": args.subject_digest or args.digest},
                    "type": "cosign container image signature",
                },
                "optional": None,
            }
        )
        signature = signing_key.sign(payload, ec.ECDSA(hashes.SHA256()))
        logged = payload
        if args.tlog_for_digest:
            logged = payload.replace(args.digest.encode(), args.tlog_for_digest.encode())
        body = canonical(
            {
                "apiVersion": "0.0.1",
                "kind": "hashedrekord",
                "spec": {
                    "data": {"hash": {"algorithm": "sha256", "value": hashlib.sha256(logged).hexdigest()}},
                    "signature": {"content": b64(signature), "publicKey": {"content": b64(leaf_pem)}},
                },
            }
        )
        entry = log_entry(authority, body, integrated_time, args.tamper_proof)
        rekor_bundle = {
            "SignedEntryTimestamp": entry["inclusionPromise"]["signedEntryTimestamp"],
            "Payload": {
                "body": entry["canonicalizedBody"],
                "integratedTime": integrated_time,
                "logIndex": int(entry["logIndex"]),
                "logID": base64.b64decode(entry["logId"]["keyId"]).hex(),
            },
        }
        out = {
            "payload": b64(payload),
            "signature": b64(signature),
            "certificate": leaf_pem.decode(),
            "chain": intermediate.public_bytes(serialization.Encoding.PEM).decode(),
            "bundle": json.dumps(rekor_bundle),
        }
        with open(args.out, "w") as f:
            json.dump(out, f)
        return
    payload_type = "application/vnd.in-toto+json"
    payload = statement(args.subject_name or args.repository, args.subject_digest or args.digest,
                        args.predicate_type)
    signature = signing_key.sign(pae(payload_type, payload), ec.ECDSA(hashes.SHA256()))
    envelope = {"payload": b64(payload), "payloadType": payload_type,
                "signatures": [{"sig": b64(signature)}]}
    logged = payload
    if args.tlog_for_digest:
        logged = statement(args.repository, args.tlog_for_digest)
    body = canonical(
        {
            "apiVersion": "0.0.1",
            "kind": "dsse",
            "spec": {
                "envelopeHash": {"algorithm": "sha256", "value": hashlib.sha256(canonical(envelope)).hexdigest()},
                "payloadHash": {"algorithm": "sha256", "value": hashlib.sha256(logged).hexdigest()},
                "signatures": [{"signature": b64(signature), "verifier": b64(leaf_pem)}],
            },
        }
    )
    bundle = {
        "mediaType": BUNDLE_MEDIA_TYPE,
        "verificationMaterial": {
            "certificate": {"rawBytes": b64(leaf.public_bytes(serialization.Encoding.DER))},
            "tlogEntries": [log_entry(authority, body, integrated_time, args.tamper_proof)],
        },
        "dsseEnvelope": envelope,
    }
    text = json.dumps(bundle)
    if args.pad:
        text = text[:-1] + ', "padding": "' + "x" * args.pad + '"}'
    with open(args.out, "w") as f:
        f.write(text)


def request(method, url, data=None, content_type=None):
    req = urllib.request.Request(url, data=data, method=method)
    if content_type:
        req.add_header("Content-Type", content_type)
    with urllib.request.urlopen(req) as response:
        return response.headers, response.read()


def put_blob(base, data):
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    headers, _ = request("POST", f"{base}/blobs/uploads/")
    location = headers["Location"]
    if location.startswith("/"):
        location = base.split("/v2/")[0] + location
    separator = "&" if "?" in location else "?"
    request("PUT", f"{location}{separator}digest={digest}", data, "application/octet-stream")
    return {"digest": digest, "size": len(data)}


def put_manifest(base, reference, manifest, media_type):
    data = json.dumps(manifest).encode()
    request("PUT", f"{base}/manifests/{reference}", data, media_type)
    return {"mediaType": media_type, "digest": "sha256:" + hashlib.sha256(data).hexdigest(), "size": len(data)}


def attach(args):
    """A bundle as an OCI 1.1 referrer of the manifest, listed under the referrers tag."""
    base = f"http://{args.registry}/v2/{args.repository}"
    with open(args.bundle, "rb") as f:
        bundle = f.read()
    empty = put_blob(base, b"{}")
    layer = put_blob(base, bundle)
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "artifactType": BUNDLE_MEDIA_TYPE,
        "config": {"mediaType": EMPTY_MEDIA_TYPE, **empty},
        "layers": [{"mediaType": BUNDLE_MEDIA_TYPE, **layer}],
        "subject": {"mediaType": MANIFEST_MEDIA_TYPE, "digest": args.digest, "size": args.size},
        "annotations": {"dev.sigstore.bundle.content": "dsse-envelope",
                        "dev.sigstore.bundle.predicateType": "https://sigstore.dev/cosign/sign/v1"},
    }
    descriptor = put_manifest(base, layer["digest"].replace(":", "-") + "-bundle", manifest, MANIFEST_MEDIA_TYPE)
    index = {
        "schemaVersion": 2,
        "mediaType": INDEX_MEDIA_TYPE,
        "manifests": [{**descriptor, "artifactType": BUNDLE_MEDIA_TYPE}],
    }
    put_manifest(base, args.digest.replace(":", "-"), index, INDEX_MEDIA_TYPE)


def attach_legacy(args):
    """A keyless signature in cosign's `.sig` tag, with its certificate, chain and Rekor bundle."""
    base = f"http://{args.registry}/v2/{args.repository}"
    with open(args.bundle) as f:
        signed = json.load(f)
    payload = base64.b64decode(signed["payload"])
    config = put_blob(base, b"{}")
    layer = put_blob(base, payload)
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **config},
        "layers": [
            {
                "mediaType": SIMPLE_SIGNING,
                **layer,
                "annotations": {
                    "dev.cosignproject.cosign/signature": signed["signature"],
                    "dev.sigstore.cosign/certificate": signed["certificate"],
                    "dev.sigstore.cosign/chain": signed["chain"],
                    "dev.sigstore.cosign/bundle": signed["bundle"],
                },
            }
        ],
    }
    put_manifest(base, args.digest.replace(":", "-") + ".sig", manifest, MANIFEST_MEDIA_TYPE)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("root")
    p.add_argument("dir")
    p.add_argument("--logs-from", help="share the Rekor and CT keys of this authority")
    p = commands.add_parser("sign")
    p.add_argument("dir")
    p.add_argument("--digest", required=True)
    p.add_argument("--repository", required=True)
    p.add_argument("--identity", required=True)
    p.add_argument("--issuer", required=True)
    p.add_argument("--issuer-override", help="the issuer the certificate names instead")
    p.add_argument("--source-repository")
    p.add_argument("--ref")
    p.add_argument("--repository-id", help="the source repository identifier claim")
    p.add_argument("--owner-id", help="the source repository owner identifier claim")
    p.add_argument("--trigger")
    p.add_argument("--format", choices=["bundle", "legacy"], default="bundle")
    p.add_argument("--expired", action="store_true", help="a certificate that ended before the entry")
    p.add_argument("--subject-digest", help="sign this digest instead")
    p.add_argument("--tlog-for-digest", help="log an entry for this digest instead")
    p.add_argument("--subject-name", help="name this repository in the statement instead")
    p.add_argument("--tamper-proof", action="store_true", help="alter the inclusion proof")
    p.add_argument("--pad", type=int, default=0, help="pad the bundle by this many bytes")
    p.add_argument("--predicate-type", default="https://sigstore.dev/cosign/sign/v1",
                   help="the in-toto predicate (another one makes an attestation)")
    p.add_argument("--out", required=True)
    for name in ("attach", "attach-legacy"):
        p = commands.add_parser(name)
        p.add_argument("--registry", required=True)
        p.add_argument("--repository", required=True)
        p.add_argument("--digest", required=True)
        p.add_argument("--size", type=int, default=0)
        p.add_argument("--bundle", required=True)
    args = parser.parse_args()
    {"root": root, "sign": sign, "attach": attach, "attach-legacy": attach_legacy}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
