#!/bin/sh
# Makes the container image the MPI tests run, offline: `localhost/cadre-mpi:1`, Debian's
# OpenMPI (openmpi-bin: mpirun, orted) with Python 3 and mpi4py (python3-mpi4py), dash as
# /bin/sh and coreutils (the workers' containers run `sh -c '... sleep ...'` while mpirun's
# daemons are started in them), and the MPI program `/opt/cadre/sum.py`. Nothing is
# fetched: the root is made of the files of the packages installed here (those and what
# they depend on), packed with tar and imported.
#
# Usage: container-mpi-image.sh [RUNTIME COMMAND LINE]   (default: podman)
# Prints the image's name; does nothing when the image exists and was made by this version
# of the script (its label `cadre.script` holds the script's checksum; an image made by
# another version is made again).
set -eu
RUNTIME=${1:-podman}
IMAGE=localhost/cadre-mpi:1
VERSION=$(cksum <"$0" | cut -d' ' -f1)
MADE=$($RUNTIME image inspect --format '{{.Id}} {{index .Labels "cadre.script"}}' "$IMAGE" 2>/dev/null || true)
if [ -n "$MADE" ] && [ "${MADE#* }" = "$VERSION" ]; then
    echo "$IMAGE"
    exit 0
fi

# The packages the image is made for; the ones they depend on follow.
NEEDED="openmpi-bin python3-mpi4py python3 dash coreutils libc6"
# Packages not followed, and not in the image, though the needed ones depend on them:
# dpkg, debconf, adduser and passwd serve the packages' maintainer scripts, which never run
# in the image; libhwloc-plugins are hwloc's optional plugins (PCI, OpenGL, OpenCL,
# libxml2), without which hwloc still reads the topology from /sys and writes its XML
# itself, and which would bring X11 and ICU. openssh-client stays, though a cadre job's
# mpirun reaches other nodes through cadre-rsh: OpenMPI 4.1's mpirun refuses to start, even
# on one node, when its rsh agent (ssh, by default) is not found.
LEFT_OUT="dpkg debconf adduser passwd libhwloc-plugins"
# Left out of the files: documentation and translations.
EXCLUDED='^/usr/share/(doc|doc-base|man|info|locale|lintian|bug)(/|$)'

ROOT=$(mktemp -d /tmp/cadre-mpi-image.XXXXXX)
trap 'rm -rf "$ROOT" "$ROOT.tar" "$ROOT.list"' EXIT

# The packages: the needed ones and, recursively, what they pre-depend and depend on,
# among the installed packages of this machine's architecture (or `all`). Of a
# dependency's alternatives the first installed one is taken, a virtual package is
# satisfied by an installed package that provides it, and versions are not checked (dpkg
# installed them together). A needed package or a dependency that nothing installed
# satisfies is named on stderr, and nothing is made.
ARCH=$(dpkg --print-architecture)
PACKAGES=$(dpkg-query -W -f='${db:Status-Abbrev}\t${Package}\t${binary:Package}\t${Architecture}\t${Provides}\t${Pre-Depends}, ${Depends}\n' |
    awk -F '\t' -v arch="$ARCH" -v needed="$NEEDED" -v left_out="$LEFT_OUT" -v image="$IMAGE" '
    function name(s) {
        sub(/^[ \t]+/, "", s)
        sub(/[ \t(].*/, "", s)
        sub(/:.*/, "", s)
        return s
    }
    function missing(what) {
        print "cannot make " image ": " what | "cat 1>&2"
        failed = 1
    }
    substr($1, 2, 1) == "i" && ($4 == arch || $4 == "all") {
        installed[$2] = $3
        deps[$2] = $6
        n = split($5, p, ",")
        for (i = 1; i <= n; i++) if (name(p[i]) != "" && !(name(p[i]) in provider)) provider[name(p[i])] = $2
    }
    END {
        n = split(left_out, l, " ")
        for (i = 1; i <= n; i++) skip[l[i]] = 1
        n = split(needed, want, " ")
        for (i = 1; i <= n; i++) {
            if (!(want[i] in installed)) {
                missing(want[i] " is not installed (apt-get install " want[i] ")")
                continue
            }
            if (!(want[i] in taken)) { taken[want[i]] = 1; queue[++last] = want[i] }
        }
        for (q = 1; q <= last; q++) {
            pkg = queue[q]
            groups = split(deps[pkg], g, ",")
            for (i = 1; i <= groups; i++) {
                alts = split(g[i], a, "|")
                if (name(a[1]) == "") continue
                chosen = ""
                for (j = 1; j <= alts && chosen == ""; j++) {
                    d = name(a[j])
                    if (d in installed) chosen = d
                    else if (d in provider) chosen = provider[d]
                }
                if (chosen == "") {
                    d = name(a[1])
                    missing(d " (which " pkg " depends on) is not installed (apt-get install " d ")")
                } else if (!(chosen in skip) && !(chosen in taken)) {
                    taken[chosen] = 1
                    queue[++last] = chosen
                }
            }
        }
        if (failed) exit 1
        for (q = 1; q <= last; q++) print installed[queue[q]]
    }')

# Their files, under their names in a merged /usr: Debian's packages still list some
# files under /bin, /lib, ..., which here, as in the image, are links into /usr. The
# compiled Python modules beside the sources are taken too where this machine has them
# (their source files have the same times in the image, so Python uses them), else every
# rank would compile the modules it imports. Only the paths that exist are kept: a file
# excluded by dpkg's path-exclude is listed but was never written.
MERGED=""
SED=""
for d in bin sbin lib lib32 lib64 libx32; do
    if [ -L "/$d" ]; then
        t=$(readlink "/$d")
        t=${t#/}
        MERGED="$MERGED $d:$t"
        SED="$SED -e s|^/$d/|/$t/| -e \\|^/$d\$|d"
    fi
done
PYTAG=$(/usr/bin/python3 -c 'import sys; print(sys.implementation.cache_tag)')
# shellcheck disable=SC2086 # $PACKAGES: names, one per word; $SED: sed's arguments
dpkg-query -L $PACKAGES | grep '^/' | grep -Ev "$EXCLUDED" | sed $SED -e 's|^/\.$||' |
    awk -v tag="$PYTAG" '{ print }
        /\.py$/ { d = $0; sub(/\/[^\/]*$/, "", d); m = substr($0, length(d) + 2); sub(/\.py$/, "", m)
                  print d "/__pycache__"; print d "/__pycache__/" m "." tag ".pyc" }' |
    LC_ALL=C sort -u |
    while IFS= read -r f; do
        if [ -n "$f" ] && { [ -L "$f" ] || [ -e "$f" ]; }; then printf '%s\n' "${f#/}"; fi
    done >"$ROOT.list"
tar -C / --no-recursion --no-unquote -cf - -T "$ROOT.list" | tar -C "$ROOT" -xpf -

for m in $MERGED; do
    ln -s "${m#*:}" "$ROOT/${m%%:*}"
done

# The alternatives the image's programs go through (mpirun -> /etc/alternatives/mpirun ->
# /usr/bin/mpirun.openmpi): those dpkg's maintainer scripts made here, which the packages'
# lists leave out. Of each, this machine's choice where the image has it, else the image's
# alternative of highest priority; its followers where the image has theirs.
for name in $(update-alternatives --get-selections | cut -d' ' -f1); do
    update-alternatives --query "$name" | awk -v root="$ROOT" '
        function has(p) { return system("test -e \"" root p "\" || test -L \"" root p "\"") == 0 }
        /^$/ { part++; next }
        part == 0 && /^Name: / { master = $2 }
        part == 0 && /^Link: / { link[master] = $2 }
        part == 0 && /^ / { link[$1] = $2 }
        part == 0 && /^Value: / { value = $2 }
        part > 0 && /^Alternative: / { alt = $2; alts[++n] = alt }
        part > 0 && /^Priority: / { priority[alt] = $2 }
        part > 0 && /^ / { slave[alt, $1] = $2 }
        END {
            chosen = ""
            if (value != "" && has(value)) chosen = value
            for (i = 1; i <= n && chosen == ""; i++) if (has(alts[i]) && (best == "" || priority[alts[i]] > priority[best])) best = alts[i]
            if (chosen == "") chosen = best
            if (chosen == "") exit
            print master, link[master], chosen
            for (s in link) if (s != master && slave[chosen, s] != "" && has(slave[chosen, s])) print s, link[s], slave[chosen, s]
        }'
done | while read -r name link target; do
    for m in $MERGED; do
        case $link in "/${m%%:*}/"*) link="/${m#*:}/${link#/"${m%%:*}"/}" ;; esac
    done
    mkdir -p "$ROOT/etc/alternatives" "$ROOT${link%/*}"
    ln -sfn "$target" "$ROOT/etc/alternatives/$name"
    ln -sfn "/etc/alternatives/$name" "$ROOT$link"
done

# The loader's cache, as on a Debian system: libraries in the directories of
# /etc/ld.so.conf.d are found.
[ -e "$ROOT/etc/ld.so.conf" ] || echo 'include /etc/ld.so.conf.d/*.conf' >"$ROOT/etc/ld.so.conf"
ldconfig -X -r "$ROOT"

mkdir -p "$ROOT/tmp" "$ROOT/root" "$ROOT/usr/local/bin" "$ROOT/opt/cadre"
chmod 1777 "$ROOT/tmp"
chmod 700 "$ROOT/root"
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n' >"$ROOT/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$ROOT/etc/group"
# Names are looked up in the files first (the job's hosts file is mounted at /etc/hosts):
# without nsswitch.conf, glibc asks DNS first and does not read /etc/hosts when DNS answers.
printf 'passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\nprotocols: files\nservices: files\n' >"$ROOT/etc/nsswitch.conf"
# Every rank adds its rank + 1 with an allreduce and says where it ran (the node's name,
# from its step's SLURMD_NODENAME).
cat >"$ROOT/opt/cadre/sum.py" <<'EOF'
import os
from mpi4py import MPI
comm = MPI.COMM_WORLD
total = comm.allreduce(comm.Get_rank() + 1, op=MPI.SUM)
print("rank %d of %d on %s sum %d" % (comm.Get_rank(), comm.Get_size(), os.environ.get("SLURMD_NODENAME", "?"), total), flush=True)
EOF

tar -C "$ROOT" --numeric-owner -cf "$ROOT.tar" .
$RUNTIME import --quiet \
    --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' \
    --change "LABEL cadre.script=$VERSION" \
    "$ROOT.tar" "$IMAGE" >/dev/null
# The image of another version, which lost its name to this one (kept while a container
# uses it).
if [ -n "$MADE" ]; then $RUNTIME rmi "${MADE%% *}" >/dev/null 2>&1 || true; fi
echo "$IMAGE"
