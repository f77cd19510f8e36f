#!/usr/bin/env python3
"""cosign's key files and key-based signatures, without llm-worker: an independent check.

    cosign_key.py open KEY                  # prints the public key of cosign's encrypted KEY
    cosign_key.py make KEY                  # writes a new encrypted KEY, prints its public key
    cosign_key.py verify --registry HOST:PORT --repository R --digest D --public PUB

The password is COSIGN_PASSWORD, as cosign reads it. The sealing is cosign's (scrypt, then
NaCl's secretbox over the PKCS#8 DER of the key), done with the standard library's scrypt and
PyNaCl (libsodium); `verify` fetches the `sha256-<hex>.sig` signature of the manifest D and
checks its ECDSA signature and payload with Python's `cryptography`.
"""

import argparse
import base64
import hashlib
import json
import os
import sys
import urllib.request

import nacl.secret
import nacl.utils
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

LABEL = "ENCRYPTED SIGSTORE PRIVATE KEY"


def password():
    return os.environ["COSIGN_PASSWORD"].encode()


def pem_body(text, label):
    begin, end = f"-----BEGIN {label}-----", f"-----END {label}-----"
    start = text.index(begin) + len(begin)
    return base64.b64decode("".join(text[start:text.index(end)].split()))


def public_pem(key):
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()


def open_key(args):
    with open(args.key) as f:
        text = f.read()
    label = LABEL if LABEL in text else "ENCRYPTED COSIGN PRIVATE KEY"
    sealed = json.loads(pem_body(text, label))
    assert sealed["kdf"]["name"] == "scrypt", sealed["kdf"]["name"]
    assert sealed["cipher"]["name"] == "nacl/secretbox", sealed["cipher"]["name"]
    params = sealed["kdf"]["params"]
    key = hashlib.scrypt(
        password(),
        salt=base64.b64decode(sealed["kdf"]["salt"]),
        n=params["N"],
        r=params["r"],
        p=params["p"],
        maxmem=256 << 20,
        dklen=32,
    )
    der = nacl.secret.SecretBox(key).decrypt(
        base64.b64decode(sealed["ciphertext"]), base64.b64decode(sealed["cipher"]["nonce"])
    )
    private = serialization.load_der_private_key(der, None)
    print(public_pem(private), end="")


def make_key(args):
    private = ec.generate_private_key(ec.SECP256R1())
    der = private.private_bytes(
        serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    salt = nacl.utils.random(32)
    key = hashlib.scrypt(password(), salt=salt, n=32768, r=8, p=1, maxmem=256 << 20, dklen=32)
    nonce = nacl.utils.random(24)
    ciphertext = nacl.secret.SecretBox(key).encrypt(der, nonce).ciphertext
    sealed = {
        "kdf": {"name": "scrypt", "params": {"N": 32768, "r": 8, "p": 1}, "salt": base64.b64encode(salt).decode()},
        "cipher": {"name": "nacl/secretbox", "nonce": base64.b64encode(nonce).decode()},
        "ciphertext": base64.b64encode(ciphertext).decode(),
    }
    body = base64.b64encode(json.dumps(sealed).encode()).decode()
    lines = [body[i:i + 64] for i in range(0, len(body), 64)]
    with open(args.key, "w") as f:
        f.write(f"-----BEGIN {LABEL}-----\n" + "\n".join(lines) + f"\n-----END {LABEL}-----\n")
    print(public_pem(private), end="")


def get(url, accept=None):
    request = urllib.request.Request(url)
    if accept:
        request.add_header("Accept", accept)
    with urllib.request.urlopen(request) as response:
        return response.read()


def verify(args):
    base = f"http://{args.registry}/v2/{args.repository}"
    tag = args.digest.replace(":", "-") + ".sig"
    manifest = json.loads(get(f"{base}/manifests/{tag}", "application/vnd.oci.image.manifest.v1+json"))
    with open(args.public, "rb") as f:
        public = serialization.load_pem_public_key(f.read())
    for layer in manifest["layers"]:
        payload = get(f"{base}/blobs/{layer['digest']}")
        assert hashlib.sha256(payload).hexdigest() == layer["digest"].split(":")[1]
        signature = base64.b64decode(layer["annotations"]["dev.cosignproject.cosign/signature"])
        public.verify(signature, payload, ec.ECDSA(hashes.SHA256()))
        signed = json.loads(payload)["critical"]
        assert signed["type"] == "cosign container image signature", signed
        assert signed["image"]["docker-manifest-digest"] == args.digest, signed
        print(f"verified: {signed['identity']['docker-reference']}@{args.digest}")
        return
    sys.exit("no signature layer")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("open", "make"):
        commands.add_parser(name).add_argument("key")
    p = commands.add_parser("verify")
    p.add_argument("--registry", required=True)
    p.add_argument("--repository", required=True)
    p.add_argument("--digest", required=True)
    p.add_argument("--public", required=True)
    args = parser.parse_args()
    {"open": open_key, "make": make_key, "verify": verify}[args.command](args)


if __name__ == "__main__":
    main()
