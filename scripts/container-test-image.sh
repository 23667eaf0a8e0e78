#!/bin/sh
# Makes the container image the tests run, offline: `localhost/cadre-test:1`, an empty root
# holding a static busybox (Debian's busybox-static) with its applets, `/etc/passwd` and
# `/etc/group` for root and nobody, and an entrypoint that prints `from-entrypoint RANK=$RANK`
# and its arguments. Nothing is fetched: the root is packed with tar and imported.
#
# Usage: container-test-image.sh [RUNTIME COMMAND LINE]   (default: podman)
# Prints the image's name; does nothing when the image exists.
set -eu
RUNTIME=${1:-podman}
IMAGE=localhost/cadre-test:1
if $RUNTIME image exists "$IMAGE" 2>/dev/null; then
    echo "$IMAGE"
    exit 0
fi
BUSYBOX=""
for b in /bin/busybox /usr/bin/busybox; do
    if [ -x "$b" ] && ! ldd "$b" >/dev/null 2>&1; then BUSYBOX=$b; break; fi
done
if [ -z "$BUSYBOX" ]; then
    echo "no static busybox (Debian: busybox-static) to make $IMAGE from" >&2
    exit 1
fi
ROOT=$(mktemp -d /tmp/cadre-test-image.XXXXXX)
trap 'rm -rf "$ROOT" "$ROOT.tar"' EXIT
mkdir -p "$ROOT/bin" "$ROOT/etc" "$ROOT/tmp" "$ROOT/work"
chmod 1777 "$ROOT/tmp"
cp "$BUSYBOX" "$ROOT/bin/busybox"
for applet in $("$BUSYBOX" --list); do
    [ "$applet" = busybox ] || ln -sf busybox "$ROOT/bin/$applet"
done
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n' >"$ROOT/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$ROOT/etc/group"
tar -C "$ROOT" -cf "$ROOT.tar" .
$RUNTIME import --quiet \
    --change 'ENV PATH=/bin' \
    --change 'WORKDIR /work' \
    --change 'ENTRYPOINT ["/bin/sh", "-c", "echo from-entrypoint RANK=$RANK \"$@\"", "entrypoint"]' \
    "$ROOT.tar" "$IMAGE" >/dev/null
echo "$IMAGE"
