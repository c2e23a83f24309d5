# shellcheck shell=bash disable=SC2034  # the names are used by the scripts that source this file
# What deploy/setup.sh and deploy/teardown.sh share: the names of everything they manage, the
# option parsing, and four primitives (show, run, exists, check_permissions). Sourced, never run.
#
# Every lookup and change goes through these primitives, so that a dry run prints exactly the
# commands a real run executes, quoted so they can be pasted, and decides "exists?" from a
# fake-state file (one resource id a line) instead of asking Google.

# --- the names ------------------------------------------------------------------------------
# Service accounts (account ids; the email is ID@PROJECT.iam.gserviceaccount.com).
SERVICE_ACCOUNTS=(relaunch-controller relaunch-push relaunch-trainer relaunch-build)
TOPICS=(relaunch-requests vertex-job-events relaunch-alerts relaunch-dead-letter)
# subscription:topic:maximum deliveries before dead-lettering
CONTROLLER_SUBSCRIPTIONS=(relaunch-requests-controller:relaunch-requests:100 vertex-job-events-controller:vertex-job-events:5)
DEAD_LETTER_INSPECT=relaunch-dead-letter-inspect
SINK=relaunch-vertex-jobs
SERVICE=relaunch-controller
REPOSITORY=relaunch
# The APIs a fresh project must enable, in the order the steps need them.
APIS=(
  cloudresourcemanager.googleapis.com iam.googleapis.com storage.googleapis.com
  artifactregistry.googleapis.com cloudbuild.googleapis.com pubsub.googleapis.com
  logging.googleapis.com run.googleapis.com aiplatform.googleapis.com monitoring.googleapis.com
)
# Project-level roles of the controller's service account.
CONTROLLER_PROJECT_ROLES=(roles/aiplatform.user roles/pubsub.subscriber roles/pubsub.publisher roles/logging.logWriter roles/monitoring.metricWriter)

# --- options ----------------------------------------------------------------------------------
DRY_RUN=0
OUT=
CHANGES=0

# usage_from FILE: the script's header comment (the lines after the shebang up to the first
# blank line), without the leading '# '.
usage_from() {
  sed -n '2,/^$/{/^#/!d;s/^# \{0,1\}//;p}' "$1"
}

# fail_usage FILE MESSAGE: a usage error: the message, the synopsis, and exit 2 (as gcloud does).
fail_usage() {
  echo "$(basename "$1"): $2" >&2
  echo "usage:" >&2
  usage_from "$1" | grep -E '^  deploy/' >&2
  exit 2
}

# setup_names PROJECT REGION: the derived names both scripts use.
setup_names() {
  PROJECT=$1
  REGION=$2
  if [[ ! $PROJECT =~ ^[a-z][a-z0-9-]{4,28}[a-z0-9]$ ]]; then
    echo "not a project id: '$PROJECT' (6 to 30 lowercase letters, digits and hyphens)" >&2
    exit 2
  fi
  if [[ ! $REGION =~ ^[a-z]+-[a-z]+[0-9]$ ]]; then
    echo "not a region: '$REGION' (for example us-central1)" >&2
    exit 2
  fi
  STATE_BUCKET=gs://$PROJECT-relaunch-state
  BUILD_BUCKET=gs://$PROJECT-relaunch-build
  CTL=relaunch-controller@$PROJECT.iam.gserviceaccount.com
  PUSH=relaunch-push@$PROJECT.iam.gserviceaccount.com
  TRAINER=relaunch-trainer@$PROJECT.iam.gserviceaccount.com
  BUILDER=relaunch-build@$PROJECT.iam.gserviceaccount.com
  REGISTRY=$REGION-docker.pkg.dev/$PROJECT/$REPOSITORY
  OUT=${OUT:-${TMPDIR:-/tmp}/relaunch-deploy-$PROJECT}
  mkdir -p "$OUT"
  OUT=$(cd "$OUT" && pwd)
  if [[ $DRY_RUN == 1 ]]; then
    FAKE_STATE=${RELAUNCH_DEPLOY_FAKE_STATE:-$OUT/fake-state}
    touch "$FAKE_STATE"
  else
    FAKE_STATE=
  fi
  WORK=$(mktemp -d)
  # Only the scratch directory (captured error output) goes; rendered files stay in $OUT.
  trap 'rm -rf "$WORK"' EXIT
}

# split_list VALUE: a comma-separated setting as one item a line, spaces removed, empties dropped.
split_list() {
  local item
  local -a items
  IFS=',' read -r -a items <<<"$1"
  for item in "${items[@]}"; do
    item=${item// /}
    [[ -n $item ]] && echo "$item"
  done
  return 0
}

# The lookup half of an IAM binding: the policy as one "ROLE MEMBER" line per pair. Matched by the
# script, not by --filter: some get-iam-policy commands (gcloud storage buckets) have no --filter.
BINDING_LOOKUP=(--flatten='bindings[].members' --format='value[separator=" "](bindings.role,bindings.members)')

# --- the primitives ---------------------------------------------------------------------------
g() { gcloud --project "$PROJECT" --quiet "$@"; }

# show PREFIX CMD...: the command as it runs, quoted so it can be pasted (g expanded to gcloud).
show() {
  local prefix=$1
  shift
  if [[ $1 == g ]]; then
    set -- gcloud --project "$PROJECT" --quiet "${@:2}"
  fi
  echo "$prefix $(printf '%q ' "$@")"
}

# run CMD...: a command that changes something. Printed; executed unless --dry-run.
run() {
  show + "$@"
  CHANGES=$((CHANGES + 1))
  if [[ $DRY_RUN == 1 ]]; then
    return 0
  fi
  "$@"
}

# exists ID [--want LINE] CMD...: whether a resource exists; CMD is a read-only describe/list
# that prints something only when it does (with --want: prints the line LINE). In a dry run the
# fake-state file decides.
exists() {
  local id=$1 want=
  shift
  if [[ $1 == --want ]]; then
    want=$2
    shift 2
  fi
  show "? [$id]" "$@"
  if [[ $DRY_RUN == 1 ]]; then
    grep -qxF -- "$id" "$FAKE_STATE"
    return
  fi
  local out
  if ! out=$("$@" 2>"$WORK/err"); then
    if grep -qiE 'not found|NOT_FOUND|does not exist|404' "$WORK/err"; then
      return 1
    fi
    cat "$WORK/err" >&2
    echo "$(basename "$0"): cannot tell whether $id exists (the command above failed); stopping" >&2
    exit 1
  fi
  if [[ -n $want ]]; then
    grep -qxF -- "$want" <<<"$out"
  else
    [[ -n $out ]]
  fi
}

# fake_add ID / fake_forget ID [PREFIX]: keep the fake state in step with what a dry run "did";
# fake_forget drops the line ID and every line starting with PREFIX (a deleted resource's bindings).
fake_add() {
  if [[ $DRY_RUN == 1 ]]; then echo "$1" >>"$FAKE_STATE"; fi
}
fake_forget() {
  if [[ $DRY_RUN == 1 ]]; then
    awk -v id="$1" -v prefix="${2:-}" '$0 != id && (prefix == "" || index($0, prefix) != 1)' \
      "$FAKE_STATE" >"$WORK/state"
    cat "$WORK/state" >"$FAKE_STATE"
  fi
}

# check_permissions SCRIPT: the person running SCRIPT holds every permission deploy/permissions.txt
# lists for it, asked of Resource Manager's testIamPermissions on the project. Names each
# missing permission with a role that grants it, and stops before anything is changed.
check_permissions() {
  local script=$1 here
  here=$(dirname "${BASH_SOURCE[0]}")
  local -a wanted=()
  local perm role
  while read -r _ perm role; do
    wanted+=("$perm")
  done < <(grep -E "^$script " "$here/permissions.txt")
  local request=$OUT/$script-permissions.json
  {
    printf '{"permissions": ['
    printf '"%s", ' "${wanted[@]}" | sed 's/, $//'
    printf ']}\n'
  } >"$request"
  local url="https://cloudresourcemanager.googleapis.com/v1/projects/$PROJECT:testIamPermissions"
  # shellcheck disable=SC2016  # the $(...) is for the reader to paste, not for us to expand
  echo "? [check:permissions] curl -sS -X POST -H \"Authorization: Bearer \$(gcloud auth print-access-token)\" -H 'Content-Type: application/json' --data @$request $url"
  if [[ $DRY_RUN == 1 ]]; then
    return 0
  fi
  local token reply
  if ! token=$(gcloud auth print-access-token 2>"$WORK/err"); then
    cat "$WORK/err" >&2
    echo "$script.sh: no credentials: run 'gcloud auth login' first" >&2
    exit 1
  fi
  if ! reply=$(curl -sS --max-time 60 -X POST -H "Authorization: Bearer $token" \
    -H 'Content-Type: application/json' --data "@$request" "$url"); then
    echo "$script.sh: cannot ask Resource Manager which permissions you hold; stopping" >&2
    exit 1
  fi
  if grep -q '"error"' <<<"$reply"; then
    echo "$reply" >&2
    echo "$script.sh: the permission check failed (does project $PROJECT exist, and can you see it?)" >&2
    exit 1
  fi
  local missing=0
  while read -r _ perm role; do
    if ! grep -qF "\"$perm\"" <<<"$reply"; then
      echo "missing permission: $perm (granted by $role)" >&2
      missing=$((missing + 1))
    fi
  done < <(grep -E "^$script " "$here/permissions.txt")
  if [[ $missing -gt 0 ]]; then
    echo "$script.sh: you lack $missing permission(s) on project $PROJECT (listed above); nothing was changed" >&2
    exit 1
  fi
  echo "= permissions: all ${#wanted[@]} held"
}
