#!/usr/bin/env bash
# Makes this directory's fixtures with the real tools: openssl for a private
# Sigstore's certificate authority (and another one), sigstore's timestamp-server
# (scripts/go-build timestamp-authority) for its timestamp authority, cosign
# (scripts/go-build cosign) for trusted roots of them (one without the timestamp
# authority) and for two bundles over one pushed artifact: one by a code-signing
# certificate the authority issued for ten minutes and the timestamp authority
# countersigned, one by a cosign key.
# Usage: COSIGN=… TSA=… make.sh HOST:PORT (a running registry, e.g. Debian's
# docker-registry).
set -euo pipefail
registry=$1
cosign=${COSIGN:-cosign}
tsa=${TSA:-timestamp-server}
work=$(mktemp -d)
trap 'kill "${tsa_pid:-}" 2>/dev/null || true; rm -rf "$work"' EXIT
here=$(cd "$(dirname "$0")" && pwd)
cd "$work"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$tsa" serve --host 127.0.0.1 --port "$port" --timestamp-signer memory --disable-ntp-monitoring \
  2>tsa.log &
tsa_pid=$!
until curl -sf "http://127.0.0.1:$port/api/v1/timestamp/certchain" > tsa-chain.pem; do sleep 0.2; done
timestamps=http://127.0.0.1:$port/api/v1/timestamp
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
printf '[ca]\ndefault_ca = ca\n[ca]\ndatabase = index.txt\nnew_certs_dir = .\nserial = serial\ndefault_md = sha256\npolicy = any\n[any]\norganizationName = optional\n' > ca.cnf
: > index.txt
echo 01 > serial
openssl ca -batch -config ca.cnf -cert fulcio.pem -keyfile fulcio.key -in leaf.csr \
  -enddate "$(date -u -d "@$(( $(date +%s) + 600 ))" +%y%m%d%H%M%SZ)" -extfile leaf.ext -notext \
  -out leaf.pem 2>/dev/null
COSIGN_PASSWORD= "$cosign" import-key-pair --key leaf.key --output-key-prefix imported >/dev/null
COSIGN_PASSWORD= "$cosign" generate-key-pair >/dev/null
for ca in fulcio other; do
  "$cosign" trusted-root create --fulcio="url=https://$ca.example.org,certificate-chain=$ca.pem" \
    --tsa="url=$timestamps,certificate-chain=tsa-chain.pem" --out "$here/$ca-root.json"
done
"$cosign" trusted-root create --fulcio="url=https://fulcio.example.org,certificate-chain=fulcio.pem" \
  --out "$here/untimed-root.json"
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
bundle bundle-certificate.json --key imported.key --certificate leaf.pem --certificate-chain fulcio.pem \
  --timestamp-server-url "$timestamps"
bundle bundle-key.json --key cosign.key
