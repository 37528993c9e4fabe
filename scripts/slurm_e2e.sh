#!/usr/bin/env bash
# End-to-end test of scripts/slurm_sweep.sh on a throwaway single-node Slurm cluster.
#
#   sudo scripts/slurm_e2e.sh
#
# Optional; CI does not run it. It needs root and a Debian/Ubuntu machine: it installs
# slurm-wlm and munge with apt-get when they are missing, writes a one-node cluster config
# (this host, its CPUs, no accounting, no cgroups) into a temporary folder, starts munged,
# slurmctld and slurmd from there (SLURM_CONF points every client at it), and stops them and
# removes the folder on exit. Each scenario compares OUT/merged with one plain run over all
# seeds (cmp of seeds.csv, summary.csv, plan.csv, frontiers.bin, fingerprint.txt):
#   A  cancel one running array task (scancel JOB_2): the merge job (afterany) must run, fail,
#      and name shard 2 and `resubmit.sh 2`; then resubmit.sh 2 completes the sweep
#      (SBATCH_OPTS="--cpus-per-task=1 ...", which the resubmission reuses: --threads 1).
#   B  kill -9 the seedsweep process of one running task, then resubmit.sh for it (the task
#      resumes the killed folder).
#   C  cancel the whole array while two tasks still pend: the merge job names all four shards
#      (partial or missing); the `resubmit.sh 0 1 2 3` it prints completes the sweep.
# The resubmissions run the commands exactly as the failed merge job's log printed them.
# Every OUT_DIR holds spaces (B's a `%` too), and the flags pass --config with a path that holds
# spaces (a copy of configs/deepspeed_tied_row_parallel.toml).
# Prints PASS/FAIL per scenario; exits non-zero when any fails. Every wait has a deadline.
# Environment:
#   SEEDSWEEP_BIN   binary (default target/release/seedsweep; it must have `merge --check`)
#   E2E_SEEDS       seeds of the sweep (default 160000: ~10 s per task of 4 on one thread)
#   E2E_PORT        slurmctld port; slurmd gets the next one (default 16817)
#   E2E_TIMEOUT     seconds each wait may take (default 300)
#   E2E_KEEP=1      keep the temporary folder (logs, outputs) for inspection
# shellcheck disable=SC2317 # functions reached through traps and "scenario_$s"
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
bin=${SEEDSWEEP_BIN:-$repo/target/release/seedsweep}
seeds=${E2E_SEEDS:-160000}
port=${E2E_PORT:-16817}
wait_s=${E2E_TIMEOUT:-300}
shards=4
flags=(--seeds "$seeds" --scenario deepspeed-tied-row-parallel --param 35-3-False-0)  # + --config
compared=(seeds.csv summary.csv plan.csv frontiers.bin fingerprint.txt)

say() { printf '[e2e %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { printf 'error: %s\n' "$*" >&2; exit 2; }

[ "$(id -u)" -eq 0 ] || die "run as root (it installs packages and starts the Slurm daemons)"
[ -x "$bin" ] || die "$bin not found; run 'cargo build --release --bin seedsweep' or set SEEDSWEEP_BIN"
export SEEDSWEEP_BIN=$bin   # slurm_sweep.sh runs the same binary
unset SBATCH_OPTS           # scenario A sets its own; resubmit.sh must reuse the saved ones
help=$("$bin" merge --help 2>/dev/null) || true
grep -q -- '--check' <<<"$help" \
  || die "$bin has no 'merge --check'; rebuild it from a tree that has it"

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null \
  || ! command -v sbatch >/dev/null || ! command -v munged >/dev/null; then
  say "installing slurm-wlm and munge"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null
fi
for p in "$port" "$((port + 1))"; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
    die "port $p is in use; set E2E_PORT to a free pair of ports"
  fi
done

work=$(mktemp -d /tmp/seedsweep-slurm-e2e.XXXXXX)
chmod 711 "$work"
conf=$work/slurm.conf
export SLURM_CONF=$conf

stop_pid_file() { # NAME FILE: end the process whose id FILE holds, waiting up to 20 s
  local name=$1 file=$2 pid i
  [ -s "$file" ] || return 0
  pid=$(cat "$file")
  kill -0 "$pid" 2>/dev/null || return 0
  kill "$pid" 2>/dev/null || true
  for ((i = 0; i < 40; i++)); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.5; done
  echo "warning: $name ($pid) ignored SIGTERM; sending SIGKILL" >&2
  kill -9 "$pid" 2>/dev/null || true
}
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ -s "$work/slurmctld.pid" ] && kill -0 "$(cat "$work/slurmctld.pid")" 2>/dev/null; then
    scancel --full --quiet --user=root 2>/dev/null || true  # this throwaway cluster's jobs only
    sleep 2
  fi
  stop_pid_file slurmd "$work/slurmd.pid"
  stop_pid_file slurmctld "$work/slurmctld.pid"
  stop_pid_file munged "$work/munge/munged.pid"
  if [ "${E2E_KEEP:-0}" = 1 ]; then
    echo "kept $work" >&2
  else
    rm -rf -- "$work"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- munge: its own key and socket in the work folder ------------------------------------------
mkdir -p "$work/munge" "$work/state" "$work/spool"
chmod 711 "$work/munge"
dd if=/dev/urandom of="$work/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$work/munge/munge.key"
# --force: munged otherwise refuses to run as root and to trust a folder under /tmp.
munged --force --key-file="$work/munge/munge.key" --socket="$work/munge/munge.socket" \
  --pid-file="$work/munge/munged.pid" --log-file="$work/munge/munged.log" \
  --seed-file="$work/munge/munged.seed"
munge -S "$work/munge/munge.socket" -n | unmunge -S "$work/munge/munge.socket" >/dev/null \
  || die "munge does not work; see $work/munge/munged.log"

# --- slurm: one node (this host), no accounting, no cgroups -------------------------------------
host=$(hostname -s)
cpus=$(nproc)
cat > "$conf" <<EOF
ClusterName=seedsweep-e2e
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$work/munge/munge.socket
CredType=cred/munge
SlurmctldPort=$port
SlurmdPort=$((port + 1))
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
ReturnToService=2
MinJobAge=3600
KillWait=5
MailProg=/bin/true
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=1000 State=UNKNOWN
PartitionName=e2e Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
slurmctld -c -f "$conf"
slurmd -f "$conf"
deadline=$((SECONDS + 60))
until [ "$(sinfo -h -o %t 2>/dev/null)" = idle ]; do
  [ "$SECONDS" -lt "$deadline" ] || die "the node did not come up idle: $(sinfo 2>&1); see $work/*.log"
  sleep 1
done
say "slurm up: $(sinfo -h -o '%P %D %t %N %c')"
out=$(srun --quiet hostname) || die "srun hostname failed"
[ "$out" = "$(hostname)" ] || [ "$out" = "$host" ] || die "srun hostname printed '$out'"

# --- helpers ------------------------------------------------------------------------------------
states() { # JOB: the JobState of each job/task it names, one per line
  scontrol -o show job "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2
}
field() { # JOB NAME: a field of `scontrol show job`
  scontrol -o show job "$1" 2>/dev/null | head -1 | tr ' ' '\n' | sed -n "s/^$2=//p"
}
wait_ended() { # JOB: wait until every task of JOB ended
  local job=$1 deadline=$((SECONDS + wait_s)) s
  while :; do
    s=$(states "$job")
    [ -n "$s" ] || { echo "  job $job is unknown to slurmctld"; return 1; }
    if ! printf '%s\n' "$s" | grep -qE '^(PENDING|RUNNING|CONFIGURING|COMPLETING|SUSPENDED|REQUEUED|RESIZING|SIGNALING|STAGE_OUT)'; then
      return 0
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "  job $job still not ended after ${wait_s}s:"; scontrol -o show job "$job" | cut -c1-400
      return 1
    fi
    sleep 1
  done
}
wait_sweeping() { # SHARD_DIR: wait until a seedsweep writes that folder, then 2 s more
  local dir=$1 deadline=$((SECONDS + wait_s))
  until pgrep -f -- "--out $dir --resume" >/dev/null && [ -e "$dir/plan.csv" ]; do
    if [ "$SECONDS" -ge "$deadline" ]; then echo "  no seedsweep wrote $dir in ${wait_s}s"; return 1; fi
    sleep 0.2
  done
  sleep 2
  pgrep -f -- "--out $dir --resume" >/dev/null || { echo "  the sweep of $dir ended too soon; raise E2E_SEEDS"; return 1; }
}
submit() { # OUT_DIR: run slurm_sweep.sh; sets array_id and merge_id
  local line
  line=$("$repo/scripts/slurm_sweep.sh" "$shards" "$1" "${flags[@]}") || { echo "  slurm_sweep.sh failed"; return 1; }
  echo "  $line"
  array_id=$(sed -n 's/^submitted array job \([0-9]*\) .* merge job \([0-9]*\) .*/\1/p' <<<"$line")
  merge_id=$(sed -n 's/^submitted array job \([0-9]*\) .* merge job \([0-9]*\) .*/\2/p' <<<"$line")
  if [ -z "$array_id" ] || [ -z "$merge_id" ]; then echo "  cannot parse: $line"; return 1; fi
}
resubmit() { # COMMAND: run a resubmit command exactly as merge.sh printed it; sets the job ids
  local line
  echo "  \$ $1"
  line=$(eval "$1") || { echo "  the resubmit command failed"; return 1; }
  echo "  $line"
  array_id=$(sed -n 's/.* as array job \([0-9]*\) and merge job \([0-9]*\) .*/\1/p' <<<"$line")
  merge_id=$(sed -n 's/.* as array job \([0-9]*\) and merge job \([0-9]*\) .*/\2/p' <<<"$line")
  if [ -z "$array_id" ] || [ -z "$merge_id" ]; then echo "  cannot parse: $line"; return 1; fi
}
printed() { # LOG SED_EXPR: the command merge.sh printed in LOG (first line the expression selects)
  sed -n "$2" "$1" | head -1
}
expect_failed_merge() { # OUT_DIR SHARD: the merge job ran (not pending), failed, names SHARD
  local dir=$1 i=$2 s log
  wait_ended "$merge_id" || return 1
  s=$(states "$merge_id")
  log=$dir/slurm-merge-$merge_id.log
  echo "  merge job $merge_id: $s (exit $(field "$merge_id" ExitCode)); its log:"
  sed 's/^/    | /' "$log"
  [ "$s" = FAILED ] || { echo "  expected the merge job to fail"; return 1; }
  grep -q "shard $i/$shards" "$log" || { echo "  its log does not name shard $i/$shards"; return 1; }
  grep -qF "resubmit.sh $i" "$log" || { echo "  its log does not name 'resubmit.sh $i'"; return 1; }
  grep -qF -- "--shard $i/$shards" "$log" || { echo "  its log lacks the direct sweep command"; return 1; }
}
expect_merged() { # OUT_DIR: the merge job completed and OUT_DIR/merged equals the reference
  local dir=$1 f s
  wait_ended "$array_id" || return 1
  wait_ended "$merge_id" || return 1
  s=$(states "$merge_id")
  [ "$s" = COMPLETED ] || { echo "  merge job $merge_id: $s"; sed 's/^/    | /' "$dir/slurm-merge-$merge_id.log"; return 1; }
  for f in "${compared[@]}"; do
    if [ -e "$ref/$f" ]; then
      cmp -- "$ref/$f" "$dir/merged/$f" || { echo "  merged/$f differs from one run"; return 1; }
    fi
  done
  echo "  merged equals one run: $(cd "$dir/merged" && echo *)"
}

# --- the reference: one run over all seeds -----------------------------------------------------
# The scenario's own config, copied to a path with spaces: a flag value the scripts must quote.
mkdir -p "$work/config dir"
cp "$repo/configs/deepspeed_tied_row_parallel.toml" "$work/config dir/tied row parallel.toml"
flags+=(--config "$work/config dir/tied row parallel.toml")
ref=$work/ref
say "reference run: seedsweep sweep ${flags[*]}"
start=$SECONDS
timeout "$wait_s" "$bin" sweep "${flags[@]}" --quiet --out "$ref" >/dev/null
say "reference done in $((SECONDS - start)) s"
for f in seeds.csv summary.csv; do [ -e "$ref/$f" ] || die "the reference run wrote no $f"; done

# --- scenario A: cancel one running task, resubmit it ---------------------------------------------
scenario_a() {
  local dir="$work/runs with space/A cancel"
  SBATCH_OPTS="--cpus-per-task=1 --time=30" submit "$dir" || return 1
  wait_sweeping "$dir/shard-2" || return 1
  echo "  scancel ${array_id}_2"
  scancel "${array_id}_2"
  expect_failed_merge "$dir" 2 || return 1
  echo "  task states: $(states "$array_id" | sort | uniq -c | xargs)"
  resubmit "$(printed "$dir/slurm-merge-$merge_id.log" 's/^  bash /bash /p')" || return 1
  expect_merged "$dir" || return 1
  # sbatch -c 1 (SLURM_CPUS_PER_TASK) reached the task as --threads 1, on the resubmission too.
  grep -qF -- '--threads 1' "$dir/slurm-${array_id}_2.log" \
    || { echo "  the resubmitted task did not get --threads 1 from SBATCH_OPTS -c 1"; return 1; }
}

# --- scenario B: kill -9 one task's seedsweep, resubmit it -----------------------------------------
scenario_b() {
  local dir="$work/runs with space/B kill 100%" pid
  submit "$dir" || return 1
  wait_sweeping "$dir/shard-1" || return 1
  pid=$(pgrep -f -- "--out $dir/shard-1 --resume" | head -1)
  echo "  kill -9 $pid ($(cd "$dir/shard-1" && echo * .??*))"
  kill -9 "$pid"
  expect_failed_merge "$dir" 1 || return 1
  echo "  task states: $(states "$array_id" | sort | uniq -c | xargs)"
  resubmit "$(printed "$dir/slurm-merge-$merge_id.log" 's/^  bash /bash /p')" || return 1
  expect_merged "$dir" || return 1
  local log="$dir/slurm-${array_id}_1.log"
  if grep -q 'holds no sweep yet' "$log"; then
    echo "  note: the resubmitted task started over (killed before its first checkpoint)"
  else
    echo "  the resubmitted task resumed the killed folder"
  fi
}

# --- scenario C: cancel the whole array while some tasks still pend, resubmit them all ------------
scenario_c() {
  local dir="$work/runs with space/C cancel all" i
  submit "$dir" || return 1
  wait_sweeping "$dir/shard-0" || return 1
  echo "  scancel $array_id (tasks: $(squeue -h -r -j "$array_id" -o '%i:%T' | xargs))"
  scancel "$array_id"
  expect_failed_merge "$dir" 3 || return 1
  for ((i = 0; i < shards; i++)); do
    grep -q "^shard $i/$shards (" "$dir/slurm-merge-$merge_id.log" || { echo "  shard $i not named"; return 1; }
  done
  resubmit "$(printed "$dir/slurm-merge-$merge_id.log" 's/^all of them: //p')" || return 1
  expect_merged "$dir"
}

failed=0
for s in a b c; do
  name=$(tr '[:lower:]' '[:upper:]' <<<"$s")
  say "scenario $name"
  if "scenario_$s"; then
    echo "PASS scenario $name"
  else
    echo "FAIL scenario $name"
    failed=1
  fi
done
exit "$failed"
