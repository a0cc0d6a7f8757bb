{% set g = cookiecutter._genie %}
{% if g.nodes > 1 %}
#!/usr/bin/env bash
# Train on {{ g.nodes }} nodes x {{ g.nproc_per_node }} processes ({{ g.rdzv }} rendezvous at {{ g.master_addr }}:{{ g.master_port }}).
# Run on every node, each with its own NODE_RANK (0 on {{ g.master_addr }}):
#   bash launch/multi_node.sh NODE_RANK [train.py arguments...]
#   bash launch/multi_node.sh NODE_RANK --preflight   # check the nodes first (launch/preflight.py)
# MASTER_ADDR and MASTER_PORT (torchrun's own names), NNODES and NPROC_PER_NODE are taken
# from the environment when set, else from the answers above (genie's smoke test sets them
# to simulate the nodes).
set -euo pipefail
# One OpenMP thread per process (torchrun's own default, set here so it does not warn).
# With few processes per node, raise it towards (CPU cores / processes) for faster CPU ops.
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
cd "$(dirname "$0")/.."
MASTER_ADDR="${MASTER_ADDR:-{{ g.master_addr }}}"
MASTER_PORT="${MASTER_PORT:-{{ g.master_port }}}"
NNODES="${NNODES:-{{ g.nodes }}}"
NPROC_PER_NODE="${NPROC_PER_NODE:-{{ g.nproc_per_node }}}"
NODE_RANK="${1:-}"
if [[ ! "$NODE_RANK" =~ ^[0-9]+$ ]] || (( NODE_RANK >= NNODES )); then
    echo "usage: bash launch/multi_node.sh NODE_RANK [train.py arguments...]  (NODE_RANK: 0-$(( NNODES - 1 )))" >&2
    exit 2
fi
shift
source launch/network.sh
node_network "$MASTER_ADDR" || exit 2
{% if g.rdzv == "c10d" %}
# c10d assigns ranks itself. NODE_RANK says which node hosts the rendezvous store (node 0):
# torch's own guess matches the address against this machine's hostname, which fails where
# the hostname maps to 127.0.1.1 or the address is on a second network interface.
# RDZV_TIMEOUT: how long the nodes wait for each other to join (after the meet below), and
# after a restart to rejoin, in seconds (torch's default).
RDZV_CONF="is_host=$(( NODE_RANK == 0 ? 1 : 0 )),join_timeout=${RDZV_TIMEOUT:-600}"
# how long a restarted node waits for the others: a worker that lost its peer says so
export GENIE_REJOIN_WAIT="${RDZV_TIMEOUT:-600}"
# A failing worker writes which restart torchrun starts into GENIE_REJOIN_FLAG; torchrun
# then waits in silence: while it has no workers, rejoin_watch says every 10 s how long.
export GENIE_REJOIN_FLAG="${TMPDIR:-/tmp}/genie-rejoin-$$"
rejoin_watch() {
    local waited=0 others
    while sleep 1 && kill -0 "$1" 2>/dev/null; do
        # torchrun's child processes but this one (exec made torchrun its parent)
        others=" $(cat /proc/"$1"/task/*/children 2>/dev/null || true)"  # threads come and go
        if [[ "${others/ $BASHPID / }" == *[0-9]* ]]; then
            # workers again, after a wait: the group re-formed
            (( waited == 0 )) || rm -f "$GENIE_REJOIN_FLAG"
            waited=0
        elif [[ -f "$GENIE_REJOIN_FLAG" ]] && (( ++waited % 10 == 0 )); then
            echo "launch: waiting for every node to rejoin ($(cat "$GENIE_REJOIN_FLAG")):" \
                "${waited} s of up to ${GENIE_REJOIN_WAIT} s" >&2
        fi
    done
    rm -f "$GENIE_REJOIN_FLAG"
}
# After an elastic restart the workers need a TCP store of their own: the rendezvous store
# they share by default refused the re-formed group ("Gloo connectFullMesh failed").
export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1
{% else %}
# How long node 0 waits for the others (after the meet below), in seconds (torch's default)
RDZV_CONF="timeout=${RDZV_TIMEOUT:-900}"
# how long a restarted node waits for the others: a worker that lost its peer says so
export GENIE_REJOIN_WAIT="${RDZV_TIMEOUT:-900}"
{% endif %}
ENTRYPOINT=train.py
export NODE_RANK MASTER_ADDR MASTER_PORT NNODES NPROC_PER_NODE LOCAL_ADDR
if [[ "${1:-}" == "--preflight" ]]; then
    # The same torchrun line as the job, after launch/preflight.py has met every node; a node
    # that never arrives is named within PREFLIGHT_WAIT seconds.
    export PREFLIGHT_WAIT="${PREFLIGHT_WAIT:-27}"
    export PREFLIGHT_FACTS="${TMPDIR:-/tmp}/preflight-$$.json"  # node 0: what it met, for the table
    python launch/preflight.py meet || exit $?
{% if g.rdzv == "c10d" %}
    RDZV_CONF="$RDZV_CONF,join_timeout=$PREFLIGHT_WAIT,read_timeout=$PREFLIGHT_WAIT"
{% else %}
    RDZV_CONF="timeout=$PREFLIGHT_WAIT"
{% endif %}
    ENTRYPOINT=launch/preflight.py
    shift
elif (( ${JOIN_WAIT:=${RDZV_TIMEOUT:-120}} > 0 )); then
    # The nodes meet before the job (launch/preflight.py join): each says every 10 s whom it
    # waits for, and a node that has not arrived within JOIN_WAIT seconds (RDZV_TIMEOUT when
    # set, else 120) stops every node with one line naming it; nodes whose node or process
    # counts or torch builds differ stop too. JOIN_WAIT=0 skips it: torchrun then waits for
    # the nodes up to RDZV_TIMEOUT, silently.
    PREFLIGHT_WAIT="$JOIN_WAIT" python launch/preflight.py join || exit $?
fi
{% with line = g.launch.multi_node, watch = g.rdzv == "c10d" %}{% include "partials/start.sh.j2" %}{% endwith %}
{% endif %}
