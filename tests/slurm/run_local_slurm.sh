#!/usr/bin/env bash
# Runs a tiny CPU campaign through a real Slurm: a one-node cluster on this machine (Debian's
# slurmctld, slurmd and munge), `snakemake --workflow-profile` with profiles/slurm as a CPU-cluster
# user edits it, then checks that every measuring job went through Slurm and that the store holds
# its run. Stops every daemon it started, also on failure. Needs root (apt-get, daemons) and the
# Slurm executor plugin in the environment that runs snakemake (pip install -e '.[slurm]').
#
#   tests/slurm/run_local_slurm.sh            # state, logs and the campaign in /tmp/rooflab-slurm
#
# No systemd, no cgroups: daemons run in the foreground as children of this script, with
# proctrack/linuxproc and task/none. No accounting database either: the plugin's job status
# command is set to squeue (slurm-status-command), and finished jobs are checked in Slurm's job
# completion log (jobcomp/filetxt) instead of sacct.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
work=${ROOFLAB_SLURM_DIR:-/tmp/rooflab-slurm}
# Ports of this test cluster, away from the defaults (6817/6818) of any real Slurm here.
ctld_port=${ROOFLAB_SLURMCTLD_PORT:-16817}
slurmd_port=${ROOFLAB_SLURMD_PORT:-16818}
export TZ=UTC # Slurm's job times and rooflab's run times in one time zone, to compare them
export SLURM_CONF=$work/etc/slurm.conf # sbatch, squeue, scancel (the plugin's too) find it here
export PATH=/usr/sbin:$PATH            # slurmctld, slurmd, munged
start=$SECONDS

say() { printf '[slurm-test %3ds] %s\n' $((SECONDS - start)) "$*"; }
fail() {
  say "FAILED: $*"
  exit 1
}

[ "$(id -u)" = 0 ] || fail "run as root (installs packages, starts the Slurm daemons)"
snakemake=$(command -v snakemake) || fail "snakemake is not on PATH (activate the environment)"
python=$(dirname "$snakemake")/python
"$python" -c 'import snakemake_executor_plugin_slurm' 2>/dev/null ||
  fail "the Slurm executor plugin is missing: pip install -e '.[slurm]'"

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null ||
  ! command -v munged >/dev/null || ! command -v sbatch >/dev/null; then
  say "installing Debian's Slurm and munge"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    slurmctld slurmd slurm-client munge >/dev/null
fi

# Processes of an earlier run that was killed before its trap ran: stop them by their PID files,
# only if the process is still the one this script started (its command line or its working
# directory names $work).
stop_daemon() {
  local pidfile=$work/run/$1.pid signal=${2:-TERM} pid
  [ -f "$pidfile" ] || return 0
  pid=$(cat "$pidfile")
  if [ -r "/proc/$pid/cmdline" ] &&
    { tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF "$work" ||
      readlink "/proc/$pid/cwd" | grep -qF "$work"; }; then
    kill -s "$signal" "$pid" 2>/dev/null || true
    for _ in $(seq 100); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile"
}
stop_all() {
  # Snakemake first (on SIGINT it cancels its Slurm jobs; SIGTERM would wait for them), then any
  # job left, so that no slurmstepd outlives its slurmd.
  stop_daemon snakemake INT
  if [ -f "$work/run/slurmctld.pid" ] && kill -0 "$(cat "$work/run/slurmctld.pid")" 2>/dev/null; then
    scancel --quiet --full --user "$(id -un)" 2>/dev/null || true
  fi
  stop_daemon slurmd
  stop_daemon slurmctld
  stop_daemon munged
}
on_exit() {
  local status=$?
  stop_all
  unlink_conf
  if [ "$status" != 0 ]; then
    say "logs: $work/log/ (slurmctld.log, slurmd.log, jobcomp.log), $work/campaign/snakemake.log"
  fi
  say "daemons stopped; exit status $status"
}
# Commands inside a job (the plugin's srun) run with Slurm's variables removed, SLURM_CONF too,
# so they read the default /etc/slurm/slurm.conf, as on a real cluster's nodes: that path is a
# link to this cluster's file while it runs. Never replace a slurm.conf this script did not make.
system_conf=/etc/slurm/slurm.conf
unlink_conf() {
  if [ -L "$system_conf" ] && [ "$(readlink "$system_conf")" = "$SLURM_CONF" ]; then
    rm -f "$system_conf"
  fi
}
stop_all
unlink_conf
if [ -e "$system_conf" ] || [ -L "$system_conf" ]; then
  fail "$system_conf exists: this machine has a Slurm of its own; not touching it"
fi
rm -rf "$work"
mkdir -p "$work"/{etc,run,log,state,spool,munge}
chmod 700 "$work/munge"
trap on_exit EXIT
trap 'exit 130' INT TERM

# munge: a fresh key and a private socket, so a system munged (if any) is left alone.
say "starting munged"
mungekey --create --keyfile="$work/munge/munge.key"
munged --foreground --force --socket="$work/munge/munge.socket" \
  --key-file="$work/munge/munge.key" --pid-file="$work/munge/munged.pid" \
  --seed-file="$work/munge/munged.seed" --log-file="$work/log/munged.log" \
  >>"$work/log/munged.out" 2>&1 &
echo $! >"$work/run/munged.pid"

# The node line as slurmd detects this machine (CPUs, sockets, cores, memory): the test cluster
# has exactly this machine's resources.
node_line=$(slurmd -C | head -1)
node=${node_line#NodeName=} && node=${node%% *}
cpus=${node_line#* CPUs=} && cpus=${cpus%% *}
cat >"$SLURM_CONF" <<EOF
ClusterName=rooflab-test
SlurmctldHost=$node(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$work/munge/munge.socket
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/run/slurmctld.own.pid
SlurmdPidFile=$work/run/slurmd.own.pid
SlurmctldLogFile=$work/log/slurmctld.log
SlurmdLogFile=$work/log/slurmd.log
# No cgroups in a container: track processes by their parent, bind nothing.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
# No accounting database: the plugin asks squeue, and squeue shows a finished job for MinJobAge
# seconds (>= 3x the plugin's first status-check delay, or it falls back to sacct).
AccountingStorageType=accounting_storage/none
MinJobAge=300
# Every finished job, one line each: the record this script checks.
JobCompType=jobcomp/filetxt
JobCompLoc=$work/log/jobcomp.log
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
MpiDefault=none
ReturnToService=2
$node_line NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF

mkdir -p "$(dirname "$system_conf")"
ln -s "$SLURM_CONF" "$system_conf"

say "starting slurmctld and slurmd ($node_line)"
slurmctld -D -c -i -f "$SLURM_CONF" >>"$work/log/slurmctld.out" 2>&1 &
echo $! >"$work/run/slurmctld.pid"
slurmd -D -f "$SLURM_CONF" >>"$work/log/slurmd.out" 2>&1 &
echo $! >"$work/run/slurmd.pid"
for _ in $(seq 60); do
  state=$(sinfo --noheader --nodes="$node" --format=%T 2>/dev/null || true)
  [ "$state" = idle ] && break
  sleep 1
done
[ "$state" = idle ] || fail "node $node is '${state:-unreachable}', not idle (see $work/log/)"
sinfo

# The campaign: the workflow's files (as tests/conftest.py copies them), the tiny config, and
# profiles/slurm with the edits a user of a CPU-only cluster without accounting makes.
campaign=$work/campaign
mkdir -p "$campaign"
for name in Snakefile rules workflow_scripts config profiles environment.yml; do
  cp -r "$repo/$name" "$campaign/"
done
cp "$repo/tests/slurm/tiny.yaml" "$campaign/config/config.yaml"
"$python" - "$repo/profiles/slurm/config.yaml" "$campaign/profiles/slurm/config.yaml" "$cpus" <<'EOF'
import sys

import yaml

source, target, cpus = sys.argv[1], sys.argv[2], int(sys.argv[3])
profile = yaml.safe_load(open(source))
edits = {
    "cores": cpus,  # this node's CPUs
    "latency-wait": 5,  # one local filesystem
    "slurm-status-command": "squeue",  # no slurmdbd, so no sacct
    "slurm-init-seconds-before-status-checks": 2,  # seconds-long jobs; default 40
    "slurm-keep-successful-logs": True,  # the job logs name the rule of each Slurm job
}
profile.update(edits)
measuring = ("ceilings", "correctness", "time_gemm", "time_workload", "counters")
for rule in (*measuring, "measure_stages", "time_timeline"):
    profile["set-resources"][rule]["gpu"] = 0  # CPU-only node
print("profile edits:", edits, "and gpu: 0 for the measuring rules")
yaml.safe_dump(profile, open(target, "w"), sort_keys=False)
EOF

say "running the campaign through Slurm"
cd "$campaign"
# In the foreground (Ctrl-C reaches it), with its PID written for the cleanup.
if ! sh -c 'echo $$ >"$1" && shift && exec "$@"' sh "$work/run/snakemake.pid" \
  "$snakemake" --workflow-profile profiles/slurm >snakemake.log 2>&1; then
  tail -40 snakemake.log
  fail "snakemake failed (log: $campaign/snakemake.log)"
fi
grep -E "SLURM run ID|has been submitted with SLURM jobid|^localrule|steps \(100%\) done" snakemake.log
# Slurm's own view: finished jobs stay in squeue for MinJobAge; the comment names the rule.
squeue --states=all --format='%.6i %.10T %.8N %.10M  %k'

say "checking the Slurm jobs against the store"
"$python" "$repo/tests/slurm/check_campaign.py" --campaign "$campaign" --node "$node" \
  --jobcomp "$work/log/jobcomp.log"
say "passed in $((SECONDS - start)) s"
