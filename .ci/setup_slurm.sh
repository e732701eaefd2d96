#!/usr/bin/env bash
# A one-node Slurm cluster on localhost (2 CPUs, 2 fake h100 GPUs) for tests/test_slurm.py, which
# runs the workflow through profiles/slurm. Needs root on Debian; no systemd.
#   bash .ci/setup_slurm.sh          install (once), configure, start, wait until the node is idle
#   bash .ci/setup_slurm.sh stop     stop the daemons this script started (by PID)
#   bash .ci/setup_slurm.sh status   exit 0 when the node is up
# Idempotent: a second start with an unchanged config and running daemons only re-checks them;
# a changed config restarts them. Daemon logs: $SLURM_LOG_DIR (default /var/log/slurm).
# SLURM_CONF (default /etc/slurm/slurm.conf, where Debian's Slurm looks) may name another path;
# then export it to the tests too, so that sbatch/squeue find the cluster.
set -euo pipefail

mode=${1:-start}
SLURM_CONF=${SLURM_CONF:-/etc/slurm/slurm.conf}
CONF_DIR=$(dirname "$SLURM_CONF")
LOG_DIR=${SLURM_LOG_DIR:-/var/log/slurm}
PID_FILE=${SLURM_PID_FILE:-/run/depthlab-slurm.pids}  # "name pid" per line
STATE_DIR=/var/lib/slurm
PACKAGES=(slurmctld slurmd slurm-client munge)
WAIT_S=${SLURM_WAIT_S:-60}
export SLURM_CONF

log() { echo "setup_slurm: $*" >&2; }

# A PID from our file still names the daemon we started (PIDs are reused).
alive() {
    local name=$1 pid=$2
    [[ -r /proc/$pid/comm ]] && [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$name" ]]
}

stop_daemons() {
    [[ -f $PID_FILE ]] || { log "no $PID_FILE: nothing to stop"; return 0; }
    local name pid pids=()
    # Reverse start order: slurmd, slurmctld, munged.
    while read -r name pid; do
        if alive "$name" "$pid"; then
            kill -TERM "$pid" 2>/dev/null || true
            pids+=("$name:$pid")
        fi
    done < <(tac "$PID_FILE")
    local entry
    for entry in "${pids[@]}"; do
        name=${entry%%:*} pid=${entry##*:}
        for _ in $(seq 50); do alive "$name" "$pid" || break; sleep 0.2; done
        if alive "$name" "$pid"; then
            log "$name ($pid) ignored SIGTERM for 10 s; SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
        fi
        log "stopped $name ($pid)"
    done
    rm -f "$PID_FILE"
}

node_state() { timeout 10 sinfo -h -N -n localhost -o '%t' 2>/dev/null | head -n1; }

node_up() {
    local state
    state=$(node_state) || return 1
    [[ $state == idle || $state == mix || $state == alloc ]]
}

daemons_alive() {
    [[ -f $PID_FILE ]] || return 1
    local name pid count=0
    while read -r name pid; do
        alive "$name" "$pid" || return 1
        count=$((count + 1))
    done < "$PID_FILE"
    [[ $count -eq 3 ]]
}

case $mode in
    stop) stop_daemons; exit 0 ;;
    status) node_up && { log "node localhost is $(node_state)"; exit 0; }
            log "cluster is not up; run: bash .ci/setup_slurm.sh"; exit 1 ;;
    start) ;;
    *) echo "usage: $0 [start|stop|status]" >&2; exit 2 ;;
esac

[[ $(id -u) -eq 0 ]] || { log "must run as root (installs packages, starts daemons)"; exit 1; }

# --- install ------------------------------------------------------------------------------------
missing=()
for package in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" \
        || missing+=("$package")
done
if ((${#missing[@]})); then
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- configure ----------------------------------------------------------------------------------
# The node's memory as slurmd measures it, so it registers without a "low RealMemory" drain.
real_memory=$(slurmd -C 2>/dev/null | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' | head -n1)
[[ -n $real_memory ]] || real_memory=$(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo)

mkdir -p "$CONF_DIR" "$LOG_DIR" "$STATE_DIR/slurmctld" "$STATE_DIR/slurmd"
new_conf=$(mktemp)
new_gres=$(mktemp)
trap 'rm -f "$new_conf" "$new_gres"' EXIT
cat > "$new_conf" <<EOF
# Written by .ci/setup_slurm.sh: one node, no accounting (hence MinJobAge=300, so squeue and
# scontrol still see finished jobs; the Snakemake profile polls with squeue).
ClusterName=depthlab
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=2
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
StateSaveLocation=$STATE_DIR/slurmctld
SlurmdSpoolDir=$STATE_DIR/slurmd
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
SchedulerType=sched/backfill
# Start each job at submission instead of batching submissions for up to 3 s.
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MinJobAge=300
GresTypes=gpu
# Trust the node line below over what slurmd detects (fake GPUs, CI machines of other sizes).
SlurmdParameters=config_overrides
NodeName=localhost NodeAddr=127.0.0.1 CPUs=2 Sockets=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=$real_memory Gres=gpu:h100:2 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP DefMemPerCPU=1000
EOF
# Slurm drops GPUs that have only a count; two device files make them real to it.
cat > "$new_gres" <<EOF
# Written by .ci/setup_slurm.sh: two fake h100 GPUs.
NodeName=localhost Name=gpu Type=h100 File=/dev/null,/dev/zero
EOF

changed=0
for pair in "$new_conf:$SLURM_CONF" "$new_gres:$CONF_DIR/gres.conf"; do
    src=${pair%%:*} dst=${pair##*:}
    if ! cmp -s "$src" "$dst"; then
        install -m 0644 "$src" "$dst"
        changed=1
    fi
done

if ((changed == 0)) && daemons_alive && node_up; then
    log "already up: node localhost is $(node_state)"
    exit 0
fi
((changed)) && log "config written to $CONF_DIR"
stop_daemons

# --- start --------------------------------------------------------------------------------------
if [[ ! -s /etc/munge/munge.key ]]; then
    mungekey --create --keyfile /etc/munge/munge.key
    chown munge:munge /etc/munge/munge.key
    chmod 0400 /etc/munge/munge.key
fi
mkdir -p /run/munge /var/log/munge /var/lib/munge
chown munge:munge /run/munge /var/log/munge /var/lib/munge
chmod 0755 /run/munge

# `setsid cmd &` from a non-interactive shell execs in place, so $! is the daemon's own PID.
# Every stream is redirected: a caller capturing our output must not wait on the daemons.
: > "$PID_FILE"
start_daemon() {
    local name=$1
    shift
    setsid "$@" < /dev/null >> "$LOG_DIR/$name.out" 2>&1 &
    echo "$name $!" >> "$PID_FILE"
}
start_daemon munged setpriv --reuid=munge --regid=munge --init-groups /usr/sbin/munged --foreground
for _ in $(seq 50); do [[ -S /run/munge/munge.socket.2 ]] && break; sleep 0.1; done
if ! munge -n < /dev/null | unmunge > /dev/null; then
    log "munged does not answer; see $LOG_DIR/munged.out"
    exit 1
fi
start_daemon slurmctld slurmctld -D -i -c
for _ in $(seq 100); do
    timeout 5 scontrol ping 2>/dev/null | grep -q UP && break
    alive slurmctld "$(awk '$1 == "slurmctld" {print $2}' "$PID_FILE")" || break
    sleep 0.1
done
start_daemon slurmd slurmd -D -N localhost

# --- wait ---------------------------------------------------------------------------------------
deadline=$((SECONDS + WAIT_S))
until node_up; do
    if ((SECONDS >= deadline)) || ! daemons_alive; then
        log "node not idle after $WAIT_S s (state: '$(node_state)'); daemon logs:"
        tail -n 20 "$LOG_DIR"/slurmctld.log "$LOG_DIR"/slurmd.log "$LOG_DIR"/*.out >&2 || true
        stop_daemons
        exit 1
    fi
    sleep 0.5
done
log "up: node localhost is $(node_state); PIDs in $PID_FILE"
