#!/usr/bin/env bash
# Makes test certificates for mcx's mTLS tests (EC P-256, valid for 2 days):
#   ca.pem/ca.key                 the job's CA
#   coordinator.pem/.key          server cert: SAN URI spiffe://mcx/job/coordinator, DNS localhost, IP 127.0.0.1
#   task<i>.pem/.key (i < N)      client certs: SAN URI spiffe://mcx/job/task/<i> (+ localhost, 127.0.0.1)
#   other_ca.pem/.key             an unrelated CA
#   other_task0.pem/.key          task 0's identity, signed by the other CA (must be refused)
#   outsider.pem/.key             signed by the job's CA, URI spiffe://elsewhere/task/0 (wrong prefix)
#   no_uri.pem/.key               signed by the job's CA, no URI SAN at all
#   operator.pem/.key             role operator: URI spiffe://mcx/job/operator/alice (read-only)
#   admin.pem/.key                role admin: URI spiffe://mcx/job/admin/root (may delete keys, cancel barriers)
# Usage: make_certs.sh OUTDIR [N=4]
set -euo pipefail
out=${1:?usage: make_certs.sh OUTDIR [N]}
n=${2:-4}
mkdir -p "$out"
cd "$out"
days=2
curve=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)

make_ca() {  # name cn
  openssl req -x509 "${curve[@]}" -keyout "$1.key" -out "$1.pem" -days $days -subj "/CN=$2" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
}

make_leaf() {  # name ca cn san
  openssl req -x509 "${curve[@]}" -keyout "$1.key" -out "$1.pem" -days $days -subj "/CN=$3" \
    -CA "$2.pem" -CAkey "$2.key" \
    -addext "basicConstraints=critical,CA:FALSE" \
    -addext "keyUsage=critical,digitalSignature,keyEncipherment" \
    -addext "extendedKeyUsage=serverAuth,clientAuth" \
    -addext "subjectAltName=$4" 2>/dev/null
}

make_ca ca "mcx test CA"
make_ca other_ca "other CA"
make_leaf coordinator ca "mcx coordinator" "URI:spiffe://mcx/job/coordinator,DNS:localhost,IP:127.0.0.1"
for ((i = 0; i < n; i++)); do
  make_leaf "task$i" ca "mcx task $i" "URI:spiffe://mcx/job/task/$i,DNS:localhost,IP:127.0.0.1"
done
make_leaf other_task0 other_ca "mcx task 0" "URI:spiffe://mcx/job/task/0,DNS:localhost,IP:127.0.0.1"
make_leaf outsider ca "outsider" "URI:spiffe://elsewhere/task/0,DNS:localhost,IP:127.0.0.1"
make_leaf no_uri ca "no uri" "DNS:localhost,IP:127.0.0.1"
make_leaf operator ca "operator alice" "URI:spiffe://mcx/job/operator/alice,DNS:localhost,IP:127.0.0.1"
make_leaf admin ca "admin root" "URI:spiffe://mcx/job/admin/root,DNS:localhost,IP:127.0.0.1"
chmod 600 ./*.key
