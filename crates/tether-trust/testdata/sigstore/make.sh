#!/usr/bin/env bash
# Makes this directory's fixtures with the real tools: openssl for a private
# Sigstore's certificate authority (and another one), cosign (scripts/go-build
# cosign) for a trusted root of it and for two bundles over one pushed artifact:
# one by a code-signing certificate the authority issued, one by a cosign key.
# Usage: make.sh HOST:PORT (a running registry, e.g. Debian's docker-registry).
set -euo pipefail
registry=$1
cosign=${COSIGN:-cosign}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
here=$(cd "$(dirname "$0")" && pwd)
cd "$work"
authority() { # NAME: a self-signed CA, 100 years
  openssl ecparam -name prime256v1 -genkey -noout -out "$1.key"
  openssl req -x509 -new -key "$1.key" -subj "/O=Private Sigstore/CN=$1" -days 36500 \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out "$1.pem"
}
authority fulcio
authority other
openssl ecparam -name prime256v1 -genkey -noout -out leaf.key
openssl req -new -key leaf.key -subj "/" -out leaf.csr
cat > leaf.ext <<'EXT'
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=codeSigning
subjectAltName=critical,email:ci@example.org
1.3.6.1.4.1.57264.1.8=ASN1:UTF8String:https://issuer.example.org
EXT
openssl x509 -req -in leaf.csr -CA fulcio.pem -CAkey fulcio.key -CAcreateserial -days 36500 \
  -extfile leaf.ext -out leaf.pem
COSIGN_PASSWORD= "$cosign" import-key-pair --key leaf.key --output-key-prefix imported >/dev/null
COSIGN_PASSWORD= "$cosign" generate-key-pair >/dev/null
for ca in fulcio other; do
  "$cosign" trusted-root create --fulcio="url=https://$ca.example.org,certificate-chain=$ca.pem" \
    --out "$here/$ca-root.json"
done
cp cosign.pub "$here/cosign.pub"
echo "the signed artifact" > artifact.txt
pushed=$("$cosign" upload blob -f artifact.txt "$registry/fixtures/artifact:v1" 2>/dev/null | tail -1)
digest=${pushed##*@}
echo "$digest" > "$here/digest"
bundle() { # OUT ARGS...: sign the artifact, keep the bundle cosign pushed as a referrer
  local out=$1; shift
  local before
  before=$(curl -s -H 'Accept: application/vnd.oci.image.index.v1+json' \
    "http://$registry/v2/fixtures/artifact/manifests/${digest/:/-}" || true)
  COSIGN_PASSWORD= "$cosign" sign --yes --tlog-upload=false --new-bundle-format \
    --allow-insecure-registry --allow-http-registry "$@" "$pushed" 2>/dev/null
  local index manifest layer
  index=$(curl -sf -H 'Accept: application/vnd.oci.image.index.v1+json' \
    "http://$registry/v2/fixtures/artifact/manifests/${digest/:/-}")
  manifest=$(echo "$index" | BEFORE="$before" python3 -c 'import json,os,sys
old = os.environ["BEFORE"]
print([m["digest"] for m in json.load(sys.stdin)["manifests"] if m["digest"] not in old][0])')
  layer=$(curl -sf -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
    "http://$registry/v2/fixtures/artifact/manifests/$manifest" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["layers"][0]["digest"])')
  curl -sf "http://$registry/v2/fixtures/artifact/blobs/$layer" > "$here/$out"
}
bundle bundle-certificate.json --key imported.key --certificate leaf.pem --certificate-chain fulcio.pem
bundle bundle-key.json --key cosign.key
