#!/bin/sh
# Build the demo step functions (and the SDK's `noop`) as static executables: no dynamic loader,
# no shared libraries to look up, so each exec call starts faster (BENCHMARKS.md: a static `noop`
# starts ~1.4x as often per second as the same program linked dynamically, faster than
# /bin/true). Static linking needs an explicit --target, so that the flag reaches the function
# binaries and not the build's own proc-macros. Prints the folder the binaries are in.
set -eu
host=$(rustc -vV | sed -n 's/^host: //p')
RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
    cargo build --release --target "$host" -p workdo-demo-functions "$@" >&2
echo "${CARGO_TARGET_DIR:-$(dirname "$0")/../target}/$host/release"
