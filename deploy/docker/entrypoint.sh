#!/bin/sh
# Entrypoint of the Tidelog image: run one node configured by TIDELOG_* variables (the contract
# is in tidelog/deploy/container.py), or, given arguments, the tidelog CLI with them.
#
#  1. copy the mounted secret -- a controller's cluster secret, a broker's own credential (a
#     broker never gets the cluster secret) -- and any TLS key to files only this user can
#     read: orchestrators mount them group-readable (Kubernetes turns defaultMode 0400 into
#     0440 when the pod has an fsGroup) or with the host file's mode (docker compose
#     bind-mounts them), and tidelog refuses a secret or key that anyone but its owner can read;
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
config="$runtime_dir/node.toml"

# private_copy VARIABLE DEFAULT COPY WHAT: point VARIABLE at a 0600 copy of the file it names.
private_copy() {
    eval "source=\${$1:-\$2}"
    if [ "$source" != "$3" ]; then
        if [ ! -r "$source" ]; then
            echo "tidelog-entrypoint: cannot read $4 $source ($1) as uid $(id -u):" \
                 "mount it readable by this user" >&2
            exit 78
        fi
        cp "$source" "$3.tmp"
        chmod 0600 "$3.tmp"
        mv -f "$3.tmp" "$3"
    fi
    eval "$1=\$3"
    export "$1"
}

umask 077
mkdir -p "$runtime_dir"
if [ "${TIDELOG_ROLE:-}" = "broker" ]; then
    private_copy TIDELOG_BROKER_CREDENTIAL_FILE /etc/tidelog/secret/broker.credential \
        "$runtime_dir/broker.credential" "the broker credential"
else
    private_copy TIDELOG_CLUSTER_SECRET_FILE /etc/tidelog/secret/cluster.secret \
        "$runtime_dir/cluster.secret" "the cluster secret"
fi
if [ -n "${TIDELOG_TLS_KEY_FILE:-}" ]; then
    private_copy TIDELOG_TLS_KEY_FILE "" "$runtime_dir/tls.key" "the TLS key"
fi

tidelog deploy container-config --out "$config"
tidelog storage format --config "$config" --cluster-id "$TIDELOG_CLUSTER_ID" --ignore-formatted
exec tidelog server --config "$config"
