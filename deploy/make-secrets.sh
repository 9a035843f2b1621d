#!/bin/sh
# Make the secrets of deploy/compose.yaml (deploy/README.md; docs/deployment.md,
# "Secrets: what goes where"):
#
#   DIR/ca.key, ca.pem                 a private CA (P-256, 10 years); ca.key signs the
#                                      certificates below: keep it offline afterwards
#   DIR/ledger.key, ledger.pem         the ledger service's TLS key and certificate
#                                      (SAN: the names clients use, LEDGER_NAMES)
#   DIR/privpipe-worker.key, .pem      the privpipe worker's TLS key and certificate
#                                      (SAN: WORKER_NAMES)
#   DIR/clients.toml                   the ledger service's clients file, one client per
#                                      role, written by `privpipe ledger serve-token`
#   DIR/releaser.token                 the releaser's ledger token (the Prefect worker's)
#   DIR/auditor.token, admin.token     the auditor's and the admin's ledger tokens
#   DIR/worker.token                   the privpipe workers' bearer token
#
# Usage: deploy/make-secrets.sh [DIR]          (default deploy/secrets; must not exist)
# Environment: PRIVPIPE (the privpipe command, default `privpipe`; run it from an
# environment with privpipe installed, or PRIVPIPE="docker run --rm -i -v $PWD/DIR:/s
# privpipe:0.1.0" with paths under /s), LEDGER_NAMES (default "ledger localhost"),
# WORKER_NAMES (default "privpipe-worker localhost"), DAYS (certificate lifetime,
# default 365), EXPIRES (the tokens' expiry, ISO 8601; default: serve-token's),
# PRIVPIPE_UID (owner of the files the containers read, default 10001, the image's
# user; applied when run as root).
#
# NEW: `privpipe ledger serve-token` comes with `privpipe ledger serve` (issue #28).
# It prints the new token once; this script keeps the last line it prints.
set -eu

DIR=${1:-deploy/secrets}
PRIVPIPE=${PRIVPIPE:-privpipe}
LEDGER_NAMES=${LEDGER_NAMES:-"ledger localhost"}
WORKER_NAMES=${WORKER_NAMES:-"privpipe-worker localhost"}
DAYS=${DAYS:-365}
PRIVPIPE_UID=${PRIVPIPE_UID:-10001}

if [ -e "$DIR" ]; then
    echo "error: $DIR exists; this script never overwrites secrets (rotate: docs/deployment.md)" >&2
    exit 2
fi
umask 077
mkdir -p "$DIR"
# An absolute path: PRIVPIPE may be a container that mounts DIR at the same path
# but starts in its own working directory (deploy/README.md).
DIR=$(cd "$DIR" && pwd)

san() {  # "a b 127.0.0.1" -> "subjectAltName=DNS:a,DNS:b,IP:127.0.0.1"
    out=""
    for n in $1; do
        case $n in
            *[!0-9.]*) entry="DNS:$n" ;;
            *) entry="IP:$n" ;;
        esac
        out="${out:+$out,}$entry"
    done
    printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n' "$out"
    printf 'authorityKeyIdentifier=keyid,issuer\nsubjectKeyIdentifier=hash\n'
}

cert() {  # cert NAME "SAN NAMES": NAME.key (0600) and NAME.pem signed by the CA
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$1" \
        -keyout "$DIR/$1.key" -out "$DIR/$1.csr" 2>/dev/null
    san "$2" > "$DIR/$1.ext"
    openssl x509 -req -in "$DIR/$1.csr" -CA "$DIR/ca.pem" -CAkey "$DIR/ca.key" \
        -CAcreateserial -days "$DAYS" -extfile "$DIR/$1.ext" -out "$DIR/$1.pem" 2>/dev/null
    rm -f "$DIR/$1.csr" "$DIR/$1.ext"
}

openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -subj "/CN=privpipe deployment CA" -days 3650 \
    -keyout "$DIR/ca.key" -out "$DIR/ca.pem" 2>/dev/null
cert ledger "$LEDGER_NAMES"
cert privpipe-worker "$WORKER_NAMES"
rm -f "$DIR/ca.srl"

# The privpipe workers' token: 32 random bytes, base64 (44 characters).
openssl rand -base64 32 > "$DIR/worker.token"

# The ledger service's clients: the file stores only each token's SHA-256; the
# token itself is printed once and kept here in NAME.token (0600).
for role in releaser auditor admin; do
    set -- ledger serve-token --clients "$DIR/clients.toml" --name "$role" --role "$role"
    if [ -n "${EXPIRES:-}" ]; then set -- "$@" --expires "$EXPIRES"; fi
    # shellcheck disable=SC2086 # PRIVPIPE may be a command with arguments
    $PRIVPIPE "$@" | tail -n 1 > "$DIR/$role.token"
    if [ ! -s "$DIR/$role.token" ]; then
        echo "error: privpipe ledger serve-token printed no token for $role" >&2
        exit 1
    fi
done

chmod 0600 "$DIR"/*
chmod 0644 "$DIR"/*.pem
chmod 0700 "$DIR"
if [ "$(id -u)" = 0 ]; then
    # Compose bind-mounts file secrets with the host's owner and mode: the image's
    # user must own the files its services read.
    # ca.key is not given to any service: it stays root's.
    for f in "$DIR"/*; do
        [ "$f" = "$DIR/ca.key" ] || chown "$PRIVPIPE_UID:$PRIVPIPE_UID" "$f"
    done
fi
echo "wrote $DIR: $(ls "$DIR" | tr '\n' ' ')"
echo "next: ca.key is only needed to sign new certificates; move it offline."
echo "after 'ledger init': privpipe ledger pubkey > $DIR/auditor.pub (deploy/README.md)"
