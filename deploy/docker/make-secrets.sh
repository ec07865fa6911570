#!/bin/sh
# The compose cluster's secrets, into deploy/docker/secrets/ (compose.yml mounts each node's
# own): the cluster secret (controllers only), each broker's credential made from it, and a CA
# with a certificate per node, named as the peer listeners check them (broker-<id>,
# controller-<id>) for the service names the nodes dial each other at. Run once, from the
# repository root, with tidelog on PATH; it refuses to overwrite an existing directory.
set -eu

out="$(dirname "$0")/secrets"
if [ -e "$out" ]; then
    echo "make-secrets.sh: $out exists; remove it to make new secrets (the volumes keep the" \
         "old cluster's data: docker compose down -v first)" >&2
    exit 1
fi
umask 077
mkdir -p "$out"
tidelog storage random-secret --out "$out/cluster.secret"
for id in 101 102 103; do
    tidelog storage broker-credential --secret-file "$out/cluster.secret" --broker-id "$id" \
        --out "$out/broker-$id.credential" >/dev/null
done
tidelog security init --out "$out/pki" \
    --node controller-1=controller-1 --node controller-2=controller-2 \
    --node controller-3=controller-3 --node broker-101=broker-1,127.0.0.1 \
    --node broker-102=broker-2,127.0.0.1 --node broker-103=broker-3,127.0.0.1
rm -f "$out/pki/ca.key"  # no node needs it; make a new CA to add nodes
echo "made $out: now let the image's user read it (sudo chown -R 10001 $out)"
