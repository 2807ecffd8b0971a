#!/usr/bin/env bash
# Makes the Rust toolchain that rust-toolchain.toml pins available to rustup. Present: nothing
# to do. A machine whose rustup holds the same release under another name (`stable`, as a
# fresh machine's does) gets the pinned name as a link to it, without a download; otherwise
# rustup installs it, and where it cannot download, this says what to change.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
root="$(dirname "$FRESHET_DEPLOY_DIR")"
want=$(sed -n 's/^channel *= *"\(.*\)"/\1/p' "$root/rust-toolchain.toml")
[[ -n "$want" ]] || die "no channel in $root/rust-toolchain.toml"

if ! command -v rustup >/dev/null 2>&1; then
    # A toolchain without rustup (a distribution's package): it must be the pinned release.
    have=$(cd / && { rustc --version 2>/dev/null || true; })
    [[ "$have" == "rustc $want "* ]] ||
        die "rust-toolchain.toml pins Rust $want; this machine has '${have:-no rustc}' and no rustup"
    log "toolchain: $have (no rustup)"
    exit 0
fi
if rustup run "$want" rustc --version >/dev/null 2>&1; then
    log "toolchain: $(rustup run "$want" rustc --version)"
    exit 0
fi
host=$(cd / && rustc -vV | sed -n 's/^host: //p')
toolchains="${RUSTUP_HOME:-$HOME/.rustup}/toolchains"
while read -r name _; do
    [[ -n "$name" && "$name" != "$want-$host" ]] || continue
    v=$(rustup run "$name" rustc --version 2>/dev/null || true)
    if [[ "$v" == "rustc $want "* && -d "$toolchains/$name" ]]; then
        # `rustup toolchain link` refuses release names: the link is made as rustup lays out
        # an installed release.
        ln -sfn "$toolchains/$name" "$toolchains/$want-$host"
        log "toolchain: $want is the installed '$name' ($v); linked as $want-$host"
        exit 0
    fi
done < <(rustup toolchain list)
log "toolchain: installing Rust $want with rustup"
rustup toolchain install "$want" --profile minimal --component rustfmt,clippy ||
    die "rust-toolchain.toml pins Rust $want, which this machine does not have and cannot download \
(it has: $(rustup toolchain list | tr '\n' ' ')); pin the release the machines have"
