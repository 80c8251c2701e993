#!/usr/bin/env bash
# Fails if tests left sandbox namespaces, links or PRRTE/agent processes behind.
# Sandbox resources are all named with the "pk8s" prefix.
# Names of a network whose owner still runs (a sandbox started by hand, another test run) are
# not leftovers: the owner holds /run/prrte-k8s-sandbox/nets/<pk8s + 6 hex>.lock while it lives.
set -u
bad=0
dead_only() {
    local n p lock
    while read -r n; do
        [[ -n $n ]] || continue
        p=${n:0:10}
        lock=/run/prrte-k8s-sandbox/nets/$p.lock
        if [[ -e $lock ]] && ! flock -n "$lock" true 2>/dev/null; then
            continue
        fi
        echo "$n"
    done
}
ns=$(ip netns list 2>/dev/null | awk '{print $1}' | grep '^pk8s' | dead_only | tr '\n' ' ')
[[ -n "${ns// /}" ]] && { echo "leftover network namespaces: $ns"; bad=1; }
links=$(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep '^pk8' | dead_only | tr '\n' ' ')
[[ -n "${links// /}" ]] && { echo "leftover links: $links"; bad=1; }
tables=$(nft list tables bridge 2>/dev/null | awk '{print $3}' | grep '^pk8s' | dead_only | tr '\n' ' ')
[[ -n "${tables// /}" ]] && { echo "leftover nftables tables (bridge): $tables"; bad=1; }
ctrs=$(buildah containers --format '{{.ContainerName}}' 2>/dev/null | grep '^pk8s' | tr '\n' ' ')
[[ -n "${ctrs// /}" ]] && { echo "leftover buildah working containers: $ctrs"; bad=1; }
procs=$(ps -eo pid=,comm= | awk '$2 ~ /^(prte|prted|prterun|prun|prrte-k8s-agen|prrte-k8s-sand)/ {print $2"("$1")"}' | tr '\n' ' ')
[[ -n "${procs// /}" ]] && { echo "leftover processes: $procs"; bad=1; }
if ((bad)); then
    echo "check-leftovers: FAILED (tests must clean up what they create)"
else
    echo "check-leftovers: nothing left behind"
fi
exit $bad
