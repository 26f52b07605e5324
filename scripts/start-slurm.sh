#!/usr/bin/env bash
# Install (if needed) and start a real single-node Slurm cluster on this
# machine, for integration tests that `sbatch` job arrays and `scancel` them.
# Meant for a throwaway Debian 12 box or container, run as root, where PID 1
# is not systemd: the daemons (munged, slurmctld, slurmd) are started
# directly and daemonize themselves.
#
#   scripts/start-slurm.sh           # install/start; exits at once if already up
#   scripts/start-slurm.sh --check   # ...then submit test jobs to prove it works
#   scripts/start-slurm.sh --clean   # ...and cancel every job left in the queue
#
# Idempotent: a second run, or a run after the daemons were killed, only
# (re)starts what is missing. Cluster layout: one node named `hostname -s`
# (address 127.0.0.1), partition `debug` (default, MaxTime=INFINITE),
# select/cons_tres + CR_Core, proctrack/linuxproc, no cgroups, no accounting.
# Logs: /var/log/slurm/{slurmctld,slurmd}.log, /var/log/munge/munged.log.
set -euo pipefail

CHECK=0
CLEAN=0
for arg in "$@"; do
  case "$arg" in
    --check) CHECK=1 ;;
    --clean) CLEAN=1 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "start-slurm: unknown argument: $arg" >&2; exit 2 ;;
  esac
done

START=$(date +%s.%N)
elapsed() { awk -v s="$START" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }'; }
log() { echo "start-slurm: $*"; }
die() { echo "start-slurm: ERROR: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "must run as root"

NODE=$(hostname -s 2>/dev/null || true)
[ -n "$NODE" ] || NODE=localhost
CONF=/etc/slurm/slurm.conf
LOGDIR=/var/log/slurm
CTLD_PID=/run/slurmctld.pid
SLURMD_PID=/run/slurmd.pid
MUNGE_PID=/run/munge/munged.pid

# Is the daemon whose pid file is $1 alive (and is it really $2)?
alive() {
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ] || return 1
  # A killed daemon can linger as a zombie when PID 1 is slow to reap it.
  ! grep -q '^State:[[:space:]]*Z' "/proc/$pid/status" 2>/dev/null
}

# Node state as sinfo prints it (idle, mix, alloc, down*, drain, ...), or "".
node_state() { timeout 10 sinfo -h -n "$NODE" -o %t 2>/dev/null | head -n1 || true; }
usable() { case "$1" in idle|mix|alloc|comp) return 0 ;; *) return 1 ;; esac; }

# Print the summary line and the sinfo table.
report_up() {
  log "Slurm is up on node $NODE after $(elapsed)s"
  sinfo
}

show_logs() {
  local f
  for f in /var/log/munge/munged.log "$LOGDIR/slurmctld.log" "$LOGDIR/slurmd.log"; do
    echo "----- last lines of $f -----" >&2
    tail -n 40 "$f" >&2 2>/dev/null || echo "(missing)" >&2
  done
}

# Cancel every job in the queue and wait (15 s at most) until it is empty.
# Useful after slurmctld was SIGKILLed: it recovers jobs from its last state
# save, which can bring back jobs that had already been cancelled.
clean_queue() {
  local ids i
  ids=$(squeue -h -o %A 2>/dev/null | sort -u | tr '\n' ' ')
  [ -n "${ids// }" ] || return 0
  log "--clean: cancelling jobs $ids"
  # shellcheck disable=SC2086
  scancel $ids 2>/dev/null || true
  for i in $(seq 1 60); do
    [ -z "$(squeue -h -o %A 2>/dev/null)" ] && return 0
    sleep 0.25
  done
  die "--clean: jobs still queued 15 s after scancel: $(squeue -h -o '%i %T' | tr '\n' ' ')"
}

# ---------------------------------------------------------------- checks ---
run_check() {
  local t0 jid ejid aj n i out st
  log "check: submitting a simple job and an env-propagation job"
  rm -f /tmp/slurm-check-*.out
  jid=$(sbatch --parsable -J check-ok -o /tmp/slurm-check-%j.out --wrap 'sleep 1; echo ok')
  ejid=$(FOO_SECRET=abc sbatch --parsable -J check-env -o /tmp/slurm-check-env-%j.out \
    --wrap 'echo "FOO_SECRET=${FOO_SECRET:-<unset>}"')
  for i in $(seq 1 60); do
    [ -z "$(squeue -h -j "$jid,$ejid" -o %i 2>/dev/null)" ] && break
    sleep 0.5
  done
  out=$(cat "/tmp/slurm-check-$jid.out" 2>/dev/null || true)
  [ "$out" = ok ] || die "check: job $jid did not print 'ok' (output: '$out')"
  log "check: job $jid completed, output: $out"
  out=$(cat "/tmp/slurm-check-env-$ejid.out" 2>/dev/null || true)
  if [ "$out" = "FOO_SECRET=abc" ]; then
    log "check: environment of the submitting shell reaches the job ($out)"
  else
    die "check: env var did not reach job $ejid (output: '$out')"
  fi

  log "check: 2-task array, both tasks must run at once"
  local before after
  before=$(pgrep -xc sleep || true)
  aj=$(sbatch --parsable -J check-array --array=0-1 --cpus-per-task=1 -o /dev/null --wrap 'sleep 30')
  n=0
  for i in $(seq 1 40); do
    n=$(squeue -h -j "$aj" -t RUNNING -o %i 2>/dev/null | wc -l)
    [ "$n" -ge 2 ] && break
    sleep 0.5
  done
  squeue -j "$aj" || true
  [ "$n" -ge 2 ] || { scancel "$aj" || true; die "check: array $aj: only $n task(s) running at once"; }
  log "check: array $aj has $n tasks RUNNING concurrently; scancel-ing it"
  t0=$(date +%s.%N)
  scancel "$aj"
  st=
  for i in $(seq 1 60); do
    st=$(squeue -h -j "$aj" -o '%i %T' 2>/dev/null || true)
    [ -z "$st" ] && break
    sleep 0.25
  done
  [ -z "$st" ] || die "check: array $aj still in squeue 15 s after scancel: $st"
  log "check: array tasks left squeue $(awk -v s="$t0" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')s after scancel"
  for i in $(seq 1 20); do
    after=$(pgrep -xc sleep || true)
    [ "${after:-0}" -le "${before:-0}" ] && break
    sleep 0.25
  done
  [ "${after:-0}" -le "${before:-0}" ] || die "check: 'sleep' processes of array $aj survived scancel"
  log "check: the tasks' processes are gone too; all checks passed ($(elapsed)s total)"
}

# The wanted slurm.conf (cheap to compute; compared with the file on disk).
CPUS=$(nproc)
MEM_MB=$(free -m | awk '/^Mem:/ { print $2 }')
# slurmd drains a node that reports less memory than configured: leave margin.
REALMEM=$(( MEM_MB * 95 / 100 ))
[ "$REALMEM" -ge 1 ] || REALMEM=1

NEWCONF=$(cat <<EOF
# Written by tunefleet scripts/start-slurm.sh: single-node test cluster.
ClusterName=tunefleet
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
MailProg=/bin/true
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=$CTLD_PID
SlurmdPidFile=$SLURMD_PID
SlurmctldLogFile=$LOGDIR/slurmctld.log
SlurmdLogFile=$LOGDIR/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
# A node that was down comes back by itself once its slurmd registers.
ReturnToService=2
# scancel: SIGTERM, then SIGKILL after KillWait seconds; forget finished jobs fast.
KillWait=5
MinJobAge=5
InactiveLimit=0
Waittime=0
SlurmdTimeout=60
NodeName=$NODE NodeHostname=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$REALMEM State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE OverSubscribe=YES State=UP
EOF
)

# ------------------------------------------------------------- fast path ---
if command -v sinfo >/dev/null && [ "$(cat "$CONF" 2>/dev/null || true)" = "$NEWCONF" ] \
    && alive "$MUNGE_PID" munged && alive "$CTLD_PID" slurmctld \
    && alive "$SLURMD_PID" slurmd && usable "$(node_state)"; then
  report_up
  [ "$CLEAN" -eq 1 ] && clean_queue
  [ "$CHECK" -eq 1 ] && run_check
  exit 0
fi

# --------------------------------------------------------------- install ---
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null \
    || ! command -v sbatch >/dev/null || ! command -v munged >/dev/null; then
  log "installing slurm-wlm and munge from apt"
  t0=$(date +%s)
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge
  log "apt install took $(( $(date +%s) - t0 ))s"
fi

# ----------------------------------------------------------------- munge ---
id munge >/dev/null 2>&1 || die "user 'munge' missing (munge package not installed properly?)"
install -d -o munge -g munge -m 0700 /etc/munge /var/lib/munge
install -d -o munge -g munge -m 0755 /run/munge
install -d -o munge -g munge -m 0700 /var/log/munge
if [ ! -s /etc/munge/munge.key ]; then
  log "creating munge key"
  if command -v mungekey >/dev/null; then
    runuser -u munge -- mungekey --create --keyfile=/etc/munge/munge.key
  else
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
  fi
fi
chown munge:munge /etc/munge/munge.key
chmod 0400 /etc/munge/munge.key
if ! alive "$MUNGE_PID" munged; then
  log "starting munged"
  # --force: carry on past a stale socket left by a killed munged.
  runuser -u munge -- munged --force
fi
for i in $(seq 1 20); do
  munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1 && break
  [ "$i" -eq 20 ] && { show_logs; die "munged does not answer"; }
  sleep 0.25
done

# ------------------------------------------------------------ slurm.conf ---
install -d -m 0755 /etc/slurm "$LOGDIR" /var/spool/slurmd
install -d -m 0700 /var/spool/slurmctld
chown root:root /var/spool/slurmd /var/spool/slurmctld

if [ "$(cat "$CONF" 2>/dev/null || true)" != "$NEWCONF" ]; then
  log "writing $CONF (node $NODE, CPUs=$CPUS, RealMemory=${REALMEM}M)"
  printf '%s\n' "$NEWCONF" >"$CONF"
  chmod 0644 "$CONF"
  # Running daemons have the old configuration: restart them.
  for pf in "$SLURMD_PID" "$CTLD_PID"; do
    pid=$(cat "$pf" 2>/dev/null || true)
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
      log "stopping pid $pid ($pf) to apply the new configuration"
      kill "$pid" 2>/dev/null || true
      for i in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    fi
  done
fi

# ------------------------------------------------------------ daemons ---
if ! alive "$CTLD_PID" slurmctld; then
  log "starting slurmctld"
  slurmctld || { show_logs; die "slurmctld failed to start"; }
fi
if ! alive "$SLURMD_PID" slurmd; then
  log "starting slurmd"
  slurmd -N "$NODE" || { show_logs; die "slurmd failed to start"; }
fi

# ------------------------------------------------------------ wait idle ---
deadline=$(( $(date +%s) + 60 ))
state=
while :; do
  state=$(node_state)
  usable "$state" && break
  case "$state" in
    # Down/drained but responding (no '*'): bring it back.
    down|drain|drng|drained|fail|failg)
      log "node $NODE is '$state'; resuming it"
      scontrol update nodename="$NODE" state=resume 2>/dev/null || true ;;
  esac
  if [ "$(date +%s)" -ge "$deadline" ]; then
    echo "start-slurm: node $NODE state: '${state:-<no answer from slurmctld>}'" >&2
    scontrol show node "$NODE" >&2 2>/dev/null || true
    show_logs
    die "node $NODE not idle after 60s"
  fi
  sleep 0.5
done

report_up
[ "$CLEAN" -eq 1 ] && clean_queue
[ "$CHECK" -eq 1 ] && run_check
exit 0
