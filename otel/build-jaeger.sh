#!/usr/bin/env bash
# Build a real Jaeger v2 binary (github.com/jaegertracing/jaeger/cmd/jaeger)
# ONCE into a cache outside the repo:
#   ${ORCHESTRA_CACHE:-$HOME/.cache/orchestra}/jaeger-<version>/jaeger
# If the binary already exists this exits 0 immediately.
#
# `go install .../cmd/jaeger@vX` refuses modules with replace directives, so we
# build through a throwaway "tool" module in a temp dir and copy the upstream
# replace directives into it.
#
# Env: ORCHESTRA_CACHE, JAEGER_VERSION (default v1.75.0), GO (go binary).
set -euo pipefail

JAEGER_VERSION="${JAEGER_VERSION:-v1.75.0}"
JAEGER_MODULE="github.com/jaegertracing/jaeger"
JAEGER_PKG="$JAEGER_MODULE/cmd/jaeger"
CACHE="${ORCHESTRA_CACHE:-$HOME/.cache/orchestra}"
DEST_DIR="$CACHE/jaeger-$JAEGER_VERSION"
BIN="$DEST_DIR/jaeger"

log() { printf '[build-jaeger] %s\n' "$*" >&2; }

if [ -x "$BIN" ]; then
    log "already built: $BIN"
    exit 0
fi

GO="${GO:-}"
if [ -z "$GO" ]; then
    if command -v go >/dev/null 2>&1; then GO="$(command -v go)"
    elif [ -x /usr/local/go/bin/go ]; then GO=/usr/local/go/bin/go
    else log "ERROR: no Go toolchain found (set GO=/path/to/go)"; exit 1
    fi
fi

# Keep the Go environment sane and predictable: no inherited GOFLAGS such as
# -mod=vendor, no workspace file, no automatic toolchain download.
export GOFLAGS="-buildvcs=false"
export GOWORK=off
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
export CGO_ENABLED="${CGO_ENABLED:-0}"

log "go: $GO ($("$GO" env GOVERSION))"
log "target: $BIN ($JAEGER_PKG@$JAEGER_VERSION)"

mkdir -p "$DEST_DIR"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/jaegerbuild.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"

start=$(date +%s)
log "creating throwaway tool module in $WORK"
"$GO" mod init jaegerbuild >/dev/null 2>&1

log "downloading $JAEGER_MODULE@$JAEGER_VERSION"
DL_JSON="$("$GO" mod download -json "$JAEGER_MODULE@$JAEGER_VERSION")"
UPSTREAM_GOMOD="$(printf '%s\n' "$DL_JSON" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')"
UPSTREAM_DIR="$(printf '%s\n' "$DL_JSON" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')"
if [ ! -f "$UPSTREAM_GOMOD" ]; then
    log "ERROR: could not locate upstream go.mod for $JAEGER_MODULE@$JAEGER_VERSION"
    exit 1
fi

# Reproduce upstream replace directives (single-line and block form). Only
# module->module@version replacements make sense outside the upstream repo;
# local-path replacements are skipped with a warning.
awk '
    /^replace[[:space:]]*\($/ { inblock = 1; next }
    inblock && /^\)/          { inblock = 0; next }
    inblock                   { print; next }
    /^replace[[:space:]]/     { sub(/^replace[[:space:]]+/, ""); print }
' "$UPSTREAM_GOMOD" | sed 's://.*$::' | while read -r old oldver arrow new newver; do
    [ -z "${old:-}" ] && continue
    if [ "$oldver" = "=>" ]; then   # "old => new [ver]" (no old version)
        newver="${new:-}"; new="$arrow"; oldver=""
    fi
    case "$new" in
        ./*|../*|/*) log "WARNING: skipping local-path replace: $old => $new"; continue ;;
    esac
    lhs="$old${oldver:+@$oldver}"
    log "replace $lhs => $new@$newver"
    "$GO" mod edit -replace "$lhs=$new@$newver"
done

log "go get -tool $JAEGER_PKG@$JAEGER_VERSION (resolving dependencies)"
"$GO" get -tool "$JAEGER_PKG@$JAEGER_VERSION"

# Version stamp like upstream's Makefile does (cmd/jaeger is Jaeger v2, whose
# tag is paired with the v1 tag in CHANGELOG.md, e.g. "v1.76.0 / v2.13.0").
V2_TAG="$(sed -n "s|^${JAEGER_VERSION} / \(v2\.[0-9.]*\).*|\1|p" "$UPSTREAM_DIR/CHANGELOG.md" 2>/dev/null | head -n 1)"
VPKG="$JAEGER_MODULE/internal/version"
LDFLAGS="-s -w -X $VPKG.latestVersion=${V2_TAG:-$JAEGER_VERSION}"

log "go build ${V2_TAG:+(Jaeger $V2_TAG) }(this can take several minutes on a small machine)"
"$GO" build -trimpath -ldflags="$LDFLAGS" -o "$BIN.tmp.$$" "$JAEGER_PKG"
mv -f "$BIN.tmp.$$" "$BIN"

log "built $BIN in $(( $(date +%s) - start ))s"
"$BIN" version 2>/dev/null | head -n 3 >&2 || true
