#!/usr/bin/env bash
# Remove what deploy/setup.sh created in a Google Cloud project (deploy/README.md, Teardown).
#
#   deploy/teardown.sh [--dry-run] [--out DIR] [--delete-buckets] PROJECT REGION
#   deploy/teardown.sh --help
#
#   --dry-run         print every command, change nothing; "exists?" is answered by the fake-state
#                     file setup's dry run wrote (DIR/fake-state unless RELAUNCH_DEPLOY_FAKE_STATE
#                     names one), and what the run would remove is taken out of it
#   --out DIR         where the permission request is written. Default: ${TMPDIR:-/tmp}/relaunch-deploy-PROJECT
#   --delete-buckets  also delete the state bucket (every job's state and history) and the build
#                     bucket, with their contents. Without it both are kept, and only the access
#                     setup granted on them is removed
#
# Settings (environment): the same RELAUNCH_SUBMITTERS, RELAUNCH_SUBMITTERS_READ_LOGS,
# RELAUNCH_CHECKPOINT_BUCKETS and RELAUNCH_TRAINER_SERVICE_ACCOUNTS setup was run with: the
# bindings setup added on what outlives the teardown (the project, your checkpoint buckets, your
# own trainer service accounts) are removed. Checkpoint buckets are never deleted, and the APIs
# stay enabled (other things in the project may use them).
#
# Vertex AI jobs still running are not cancelled: cancel them first (`relaunch cancel JOB`), or
# they lose their controller and, once relaunch-trainer is deleted, their identity.

set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=deploy/lib.sh
. "$HERE/lib.sh"

DELETE_BUCKETS=0
POSITIONAL=()
while [[ $# -gt 0 ]]; do
  case $1 in
    -h | --help) usage_from "$0"; exit 0 ;;
    --dry-run) DRY_RUN=1 ;;
    --delete-buckets) DELETE_BUCKETS=1 ;;
    --out)
      [[ $# -ge 2 ]] || fail_usage "$0" "--out needs a directory"
      OUT=$2
      shift
      ;;
    --out=*) OUT=${1#--out=} ;;
    -*) fail_usage "$0" "unknown option $1" ;;
    *) POSITIONAL+=("$1") ;;
  esac
  shift
done
if [[ ${#POSITIONAL[@]} -ne 2 ]]; then
  fail_usage "$0" "expected PROJECT and REGION, got ${#POSITIONAL[@]} argument(s)"
fi
setup_names "${POSITIONAL[0]}" "${POSITIONAL[1]}"
[[ $DRY_RUN == 0 ]] || echo "fake state: $FAKE_STATE"

# unbind KIND TARGET MEMBER ROLE [WHERE...]: remove an IAM binding setup added, if present.
unbind() {
  local kind=$1 target=$2 member=$3 role=$4
  shift 4
  local -a group condition=()
  read -r -a group <<<"$kind"
  if [[ $kind == projects ]]; then condition=(--condition=None); fi
  local id="binding:$kind:$target:$member:$role"
  if exists "$id" --want "$role $member" g "${group[@]}" get-iam-policy "$target" "$@" "${BINDING_LOOKUP[@]}"; then
    run g "${group[@]}" remove-iam-policy-binding "$target" "$@" --member "$member" --role "$role" "${condition[@]}"
    fake_forget "$id"
  else
    echo "= absent: $id"
  fi
}

# kind:target prefixes of binding ids, as setup writes them ("binding:KIND:TARGET:...").
resource_kinds() {
  case $1 in
    topic:*) echo "pubsub topics:${1#topic:}" ;;
    sub:*) echo "pubsub subscriptions:${1#sub:}" ;;
    bucket:*) echo "storage buckets:${1#bucket:}" ;;
    service:*) echo "run services:${1#service:}" ;;
    repository:*) echo "artifacts repositories:${1#repository:}" ;;
    sa:*) echo "iam service-accounts:${1#sa:}@$PROJECT.iam.gserviceaccount.com" ;;
    *) echo "$1" ;;
  esac
}
# drop ID DESCRIBE... -- DELETE...: remove, forgetting the bindings on the resource under their name.
drop() {
  local id=$1
  shift
  local describe=()
  while [[ $1 != -- ]]; do
    describe+=("$1")
    shift
  done
  shift
  if exists "$id" "${describe[@]}"; then
    run "$@"
    fake_forget "$id" "binding:$(resource_kinds "$id"):"
  else
    echo "= absent: $id"
  fi
}

check_permissions teardown

# --- paging: policies, then the channels they notify ----------------------------------------------
while read -r name; do
  lookup=(g alpha monitoring policies list --filter="displayName=\"$name\"" --format='value(name)')
  if exists "policy:$name" "${lookup[@]}"; then
    if [[ $DRY_RUN == 1 ]]; then
      policies=("projects/$PROJECT/alertPolicies/POLICY_ID")
    else
      mapfile -t policies < <("${lookup[@]}")
    fi
    for policy in "${policies[@]}"; do
      run g alpha monitoring policies delete "$policy"
    done
    fake_forget "policy:$name"
  else
    echo "= absent: policy:$name"
  fi
done < <(sed -n 's/^displayName: "\(.*\)"$/\1/p' "$HERE/alert-policies.yaml")
for name in "Relaunch e-mail" "Relaunch webhook"; do
  lookup=(g beta monitoring channels list --filter="displayName=\"$name\"" --format='value(name)')
  if exists "channel:$name" "${lookup[@]}"; then
    if [[ $DRY_RUN == 1 ]]; then
      channels=("projects/$PROJECT/notificationChannels/CHANNEL_ID")
    else
      mapfile -t channels < <("${lookup[@]}")
    fi
    for channel in "${channels[@]}"; do
      run g beta monitoring channels delete "$channel"
    done
    fake_forget "channel:$name"
  else
    echo "= absent: channel:$name"
  fi
done

# --- the service, the event feed, the topics -------------------------------------------------------
drop "service:$SERVICE" g run services describe "$SERVICE" --region "$REGION" --format='value(metadata.name)' \
  -- g run services delete "$SERVICE" --region "$REGION"
drop "sink:$SINK" g logging sinks describe "$SINK" --format='value(name)' \
  -- g logging sinks delete "$SINK"
for triple in "${CONTROLLER_SUBSCRIPTIONS[@]}"; do
  sub=${triple%%:*}
  drop "sub:$sub" g pubsub subscriptions describe "$sub" --format='value(name)' \
    -- g pubsub subscriptions delete "$sub"
done
drop "sub:$DEAD_LETTER_INSPECT" g pubsub subscriptions describe "$DEAD_LETTER_INSPECT" --format='value(name)' \
  -- g pubsub subscriptions delete "$DEAD_LETTER_INSPECT"
for topic in "${TOPICS[@]}"; do
  drop "topic:$topic" g pubsub topics describe "$topic" --format='value(name)' \
    -- g pubsub topics delete "$topic"
done
# The repository goes with every image in it.
drop "repository:$REPOSITORY" g artifacts repositories describe "$REPOSITORY" --location "$REGION" --format='value(name)' \
  -- g artifacts repositories delete "$REPOSITORY" --location "$REGION"
fake_forget "" "image:"

# --- access granted on what stays (before the accounts go: a deleted member cannot be named) -------
for role in "${CONTROLLER_PROJECT_ROLES[@]}"; do
  unbind projects "$PROJECT" "serviceAccount:$CTL" "$role"
done
unbind projects "$PROJECT" "serviceAccount:$BUILDER" roles/logging.logWriter
mapfile -t EXTRA_TRAINERS < <(split_list "${RELAUNCH_TRAINER_SERVICE_ACCOUNTS:-}")
for account in "${EXTRA_TRAINERS[@]}"; do
  unbind "iam service-accounts" "$account" "serviceAccount:$CTL" roles/iam.serviceAccountUser
done
mapfile -t CHECKPOINT_BUCKETS < <(split_list "${RELAUNCH_CHECKPOINT_BUCKETS:-}")
for bucket in "${CHECKPOINT_BUCKETS[@]}"; do
  bucket=${bucket#gs://}
  unbind "storage buckets" "gs://$bucket" "serviceAccount:$CTL" roles/storage.objectViewer
  unbind "storage buckets" "gs://$bucket" "serviceAccount:$TRAINER" roles/storage.objectAdmin
done
mapfile -t SUBMITTERS < <(split_list "${RELAUNCH_SUBMITTERS:-}")
if [[ ${RELAUNCH_SUBMITTERS_READ_LOGS:-false} == true ]]; then
  for member in "${SUBMITTERS[@]}"; do
    unbind projects "$PROJECT" "$member" roles/logging.viewer
  done
fi

# --- the buckets: kept unless asked ------------------------------------------------------------------
if [[ $DELETE_BUCKETS == 1 ]]; then
  for bucket in "$STATE_BUCKET" "$BUILD_BUCKET"; do
    drop "bucket:$bucket" g storage buckets describe "$bucket" --format='value(name)' \
      -- g storage rm --recursive "$bucket"
  done
else
  unbind "storage buckets" "$STATE_BUCKET" "serviceAccount:$CTL" roles/storage.objectAdmin
  for member in "${SUBMITTERS[@]}"; do
    unbind "storage buckets" "$STATE_BUCKET" "$member" roles/storage.objectViewer
  done
  unbind "storage buckets" "$BUILD_BUCKET" "serviceAccount:$BUILDER" roles/storage.objectViewer
  echo "kept: $STATE_BUCKET and $BUILD_BUCKET (--delete-buckets deletes them)"
fi

# --- the service accounts ----------------------------------------------------------------------------
for sa in "${SERVICE_ACCOUNTS[@]}"; do
  drop "sa:$sa" g iam service-accounts describe "$sa@$PROJECT.iam.gserviceaccount.com" --format='value(email)' \
    -- g iam service-accounts delete "$sa@$PROJECT.iam.gserviceaccount.com"
done

if [[ $CHANGES == 0 ]]; then
  echo "nothing to do: nothing setup.sh creates is left"
elif [[ $DRY_RUN == 1 ]]; then
  echo "dry run: $CHANGES change(s) shown above, none made"
else
  echo "done: $CHANGES change(s)"
fi
