//! The setup program PID 1 of a container on the host's filesystem runs: bind mounts (mount
//! points that the host lacks are made inside the container only), working directory, then the
//! command with exactly the container's environment; and the containers' bind mounts.

use super::spec::ContainerSpec;
use anyhow::Context;
use std::path::PathBuf;

/// Marker passed as `$0` to the pod setup program (shows up in `ps`).
pub(super) const INIT_ARG0: &str = "pk8s-pod-init";

/// Name of the tmpfs mounts the setup program puts over directories to create mount points.
pub(super) const PUNCH_FS: &str = "pk8s-pod";

/// The program PID 1 of every pod runs before it becomes the container command.
///
/// Positional arguments: ready-file, workdir, path of `env`, number of bind mounts N,
/// then N (source, target) pairs, then `NAME=VALUE` words, then the command. stdout is the pod
/// log and stderr is pointed there too (the outer tools' stderr goes to a separate file). Errors
/// go to the log and exit with 125; "ok" is written to the ready file right before the final
/// `exec env -i -- NAME=VALUE... command...`, which gives the command exactly the pod's
/// environment.
pub(super) const POD_INIT: &str = r#"
exec 2>&1
set -u
die() { printf 'pod-init: %s\n' "$*" >&2; exit 125; }

# Cover directory $1 with a pod-private tmpfs that keeps its current entries visible, so that
# new mount points can be created below it without touching the host.
punch() {
  d=$(readlink -f -- "$1") || die "cannot resolve $1"
  [ "$d" != / ] || die "cannot create mount point $2: no existing directory below / to cover"
  m=$(stat -c %a -- "$d") && u=$(stat -c %u -- "$d") && g=$(stat -c %g -- "$d") || die "cannot stat $d"
  exec 3<"$d" || die "cannot open $d"
  mount -n -t tmpfs -o "mode=$m,uid=$u,gid=$g" PUNCH_FS "$d" || die "cannot mount tmpfs on $d"
  for e in /proc/self/fd/3/* /proc/self/fd/3/.[!.]* /proc/self/fd/3/..?*; do
    [ -e "$e" ] || [ -L "$e" ] || continue
    t=$d/${e##*/}
    if [ -L "$e" ]; then
      ln -s -- "$(readlink -- "$e")" "$t" || die "cannot keep $t visible"
    elif [ -d "$e" ]; then
      { [ -d "$t" ] || mkdir -- "$t"; } && mount -n -c --rbind -- "$e" "$t" || die "cannot keep $t visible"
    else
      { [ -e "$t" ] || : >"$t"; } && mount -n -c --bind -- "$e" "$t" || die "cannot keep $t visible"
    fi
  done
  exec 3<&-
}

bind() {
  src=$1 dst=$2
  [ -e "$src" ] || die "bind source $src does not exist"
  if [ ! -e "$dst" ]; then
    a=$(dirname -- "$dst")
    while [ ! -e "$a" ]; do a=$(dirname -- "$a"); done
    [ -d "$a" ] || die "cannot create mount point $dst: $a is not a directory"
    [ "$(findmnt -n -o SOURCE -T "$a")" = PUNCH_FS ] || punch "$a" "$dst"
    if [ -d "$src" ]; then
      mkdir -p -- "$dst" || die "cannot create mount point $dst"
    else
      { mkdir -p -- "$(dirname -- "$dst")" && : >"$dst"; } || die "cannot create mount point $dst"
    fi
  fi
  mount -n --rbind -- "$src" "$dst" || die "cannot bind-mount $src on $dst"
}

ready=$1 wd=$2 envbin=$3 n=$4
shift 4
exec 4>"$ready" || die "cannot open $ready"
while [ "$n" -gt 0 ]; do
  bind "$1" "$2"
  shift 2
  n=$((n - 1))
done
cd -- "$wd" || die "cannot change to working directory $wd"
echo ok >&4 && exec 4>&- || die "cannot write $ready"
exec "$envbin" -i -- "$@"
"#;

/// The container's bind mounts with their sources resolved on the host (each must exist).
pub(super) fn resolved_binds(
    c: &ContainerSpec,
    pod: &str,
) -> anyhow::Result<Vec<(PathBuf, PathBuf)>> {
    let mut binds = Vec::with_capacity(c.bind_mounts.len() + 1);
    for (src, dst) in &c.bind_mounts {
        let src = std::fs::canonicalize(src)
            .with_context(|| format!("bind-mount source {} of pod {pod}", src.display()))?;
        binds.push((src, dst.clone()));
    }
    Ok(binds)
}
