#!/bin/sh
# Entrypoint of the Tidelog image: run one node configured by TIDELOG_* variables (the contract
# is in tidelog/deploy/container.py), or, given arguments, the tidelog CLI with them.
#
#  1. copy the mounted cluster secret to a file only this user can read: orchestrators mount it
#     group-readable (Kubernetes turns defaultMode 0400 into 0440 when the pod has an fsGroup)
#     or with the host file's mode (docker compose bind-mounts it), and tidelog refuses a secret
#     file that anyone but its owner can read;
#  2. render node.toml from the environment (`tidelog deploy container-config`);
#  3. format the data dir on first start (--ignore-formatted: a no-op afterwards; other ids
#     than the directory's are an error, so a volume never changes clusters or nodes);
#  4. exec the node, so it is the container's main process and gets SIGTERM (controlled
#     shutdown) directly.
set -eu

if [ "$#" -gt 0 ]; then
    exec tidelog "$@"
fi

runtime_dir="${TIDELOG_RUNTIME_DIR:-/run/tidelog}"
secret_source="${TIDELOG_CLUSTER_SECRET_FILE:-/etc/tidelog/secret/cluster.secret}"
secret_copy="$runtime_dir/cluster.secret"
config="$runtime_dir/node.toml"

umask 077
mkdir -p "$runtime_dir"
if [ "$secret_source" != "$secret_copy" ]; then
    if [ ! -r "$secret_source" ]; then
        echo "tidelog-entrypoint: cannot read the cluster secret $secret_source" \
             "(TIDELOG_CLUSTER_SECRET_FILE) as uid $(id -u): mount it readable by this user" >&2
        exit 78
    fi
    cp "$secret_source" "$secret_copy.tmp"
    chmod 0600 "$secret_copy.tmp"
    mv -f "$secret_copy.tmp" "$secret_copy"
fi
TIDELOG_CLUSTER_SECRET_FILE="$secret_copy"
export TIDELOG_CLUSTER_SECRET_FILE

tidelog deploy container-config --out "$config"
tidelog storage format --config "$config" --cluster-id "$TIDELOG_CLUSTER_ID" --ignore-formatted
exec tidelog server --config "$config"
