#!/usr/bin/env bash
# Create Relaunch's Google Cloud resources (see deploy/README.md).
#
#   deploy/setup.sh [--dry-run] [--update-service] PROJECT REGION [IMAGE]
#
# Settings (environment):
#   RELAUNCH_CHECKPOINT_BUCKETS  comma-separated checkpoint buckets (names, no gs://): the controller
#                                gets read access, the trainer's service account write access
#   RELAUNCH_ALERT_EMAIL         e-mail address alert policies notify (a notification channel)
#   RELAUNCH_ALERT_WEBHOOK_URL   webhook URL alert policies notify (a notification channel)
#   RELAUNCH_DEPLOY_FAKE_STATE   dry-run only: a file listing resources that "exist", one id a line;
#                                what a dry run would create is appended, so a second dry run
#                                shows what a re-run does (nothing)
#
# Idempotent: every resource is looked up first (describe / list by name) and created only when
# missing; an IAM binding is added only when absent. Any other failure stops the script at once.
set -euo pipefail

DRY_RUN=0
UPDATE_SERVICE=0
while [[ $# -gt 0 && $1 == --* ]]; do
  case $1 in
    --dry-run) DRY_RUN=1 ;;
    --update-service) UPDATE_SERVICE=1 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
PROJECT=${1:?usage: setup.sh [--dry-run] [--update-service] PROJECT REGION [IMAGE]}
REGION=${2:?usage: setup.sh [--dry-run] [--update-service] PROJECT REGION [IMAGE]}
IMAGE=${3:-$REGION-docker.pkg.dev/$PROJECT/relaunch/controller:latest}
HERE=$(cd "$(dirname "$0")" && pwd)
FAKE_STATE=${RELAUNCH_DEPLOY_FAKE_STATE:-}
STATE_BUCKET=gs://$PROJECT-relaunch-state
CTL=relaunch-controller@$PROJECT.iam.gserviceaccount.com
PUSH=relaunch-push@$PROJECT.iam.gserviceaccount.com
TRAINER=relaunch-trainer@$PROJECT.iam.gserviceaccount.com
CREATED=0

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# show CMD...: the command as it runs, quoted so it can be pasted (g expanded to gcloud).
show() {
  local prefix=$1
  shift
  if [[ $1 == g ]]; then
    set -- gcloud --project "$PROJECT" --quiet "${@:2}"
  fi
  echo "$prefix $(printf '%q ' "$@")"
}

# --- the three primitives -----------------------------------------------------------------
# run CMD...: a command that changes something. Printed; executed unless --dry-run.
run() {
  show + "$@"
  CREATED=$((CREATED + 1))
  if [[ $DRY_RUN == 1 ]]; then
    return 0
  fi
  "$@"
}

# exists ID CMD...: whether a resource exists; CMD is a read-only describe/list that succeeds
# (and prints something) only when it does. In a dry run the fake-state file decides.
exists() {
  local id=$1
  shift
  show "? [$id]" "$@"
  if [[ $DRY_RUN == 1 ]]; then
    [[ -n $FAKE_STATE && -f $FAKE_STATE ]] && grep -qxF -- "$id" "$FAKE_STATE"
    return
  fi
  local out
  if ! out=$("$@" 2>"$WORK/err"); then
    if grep -qiE 'not found|NOT_FOUND|does not exist|404' "$WORK/err"; then
      return 1
    fi
    cat "$WORK/err" >&2
    echo "setup.sh: cannot tell whether $id exists; stopping" >&2
    exit 1
  fi
  [[ -n $out ]]
}

# ensure ID DESCRIBE... -- CREATE...: create the resource unless it exists.
ensure() {
  local id=$1
  shift
  local describe=()
  while [[ $1 != -- ]]; do
    describe+=("$1")
    shift
  done
  shift
  if exists "$id" "${describe[@]}"; then
    echo "= exists: $id"
  else
    run "$@"
    if [[ $DRY_RUN == 1 && -n $FAKE_STATE ]]; then
      echo "$id" >>"$FAKE_STATE"
    fi
  fi
}

g() { gcloud --project "$PROJECT" --quiet "$@"; }

# binding KIND TARGET MEMBER ROLE [EXTRA...]: add an IAM binding unless present.
# KIND is a gcloud group whose get-iam-policy / add-iam-policy-binding take TARGET.
binding() {
  local kind=$1 target=$2 member=$3 role=$4
  shift 4
  read -r -a group <<<"$kind"
  ensure "binding:$kind:$target:$member:$role" \
    g "${group[@]}" get-iam-policy "$target" "$@" --flatten='bindings[].members' \
    --filter="bindings.role=$role AND bindings.members=$member" --format='value(bindings.role)' \
    -- g "${group[@]}" add-iam-policy-binding "$target" "$@" --member "$member" --role "$role"
}

# --- the project ------------------------------------------------------------------------------
if [[ $DRY_RUN == 1 ]]; then
  PROJECT_NUMBER=000000000000
else
  PROJECT_NUMBER=$(g projects describe "$PROJECT" --format='value(projectNumber)')
fi
PUBSUB_AGENT=service-$PROJECT_NUMBER@gcp-sa-pubsub.iam.gserviceaccount.com

for sa in relaunch-controller relaunch-push relaunch-trainer; do
  ensure "sa:$sa" g iam service-accounts describe "$sa@$PROJECT.iam.gserviceaccount.com" --format='value(email)' \
    -- g iam service-accounts create "$sa" --display-name "$sa"
done
ensure "bucket:$STATE_BUCKET" g storage buckets describe "$STATE_BUCKET" --format='value(name)' \
  -- g storage buckets create "$STATE_BUCKET" --location "$REGION" --uniform-bucket-level-access

for topic in relaunch-requests vertex-job-events relaunch-alerts relaunch-dead-letter; do
  ensure "topic:$topic" g pubsub topics describe "$topic" --format='value(name)' \
    -- g pubsub topics create "$topic"
done
# Both controller subscriptions back off between redeliveries and dead-letter a message that
# keeps failing, so nothing loops for ever. Requests get Pub/Sub's maximum of 100 deliveries: the
# controller acks every request it can record, so a request fails only when the controller
# holding it dies, and one crash costs every message in flight a delivery. A log entry is only a
# hint (the reconcile pass is the safety net): 5.
for triple in relaunch-requests-controller:relaunch-requests:100 vertex-job-events-controller:vertex-job-events:5; do
  sub=${triple%%:*} rest=${triple#*:} topic=${rest%%:*} attempts=${triple##*:}
  ensure "sub:$sub" g pubsub subscriptions describe "$sub" --format='value(name)' \
    -- g pubsub subscriptions create "$sub" --topic "$topic" --ack-deadline 60 \
    --dead-letter-topic relaunch-dead-letter --max-delivery-attempts "$attempts" \
    --min-retry-delay 10s --max-retry-delay 600s
  # Dead-lettering needs the Pub/Sub service agent to consume from the subscription.
  binding "pubsub subscriptions" "$sub" "serviceAccount:$PUBSUB_AGENT" roles/pubsub.subscriber
done
# An unattached dead-letter topic would drop what it receives: keep a subscription on it.
ensure "sub:relaunch-dead-letter-inspect" g pubsub subscriptions describe relaunch-dead-letter-inspect --format='value(name)' \
  -- g pubsub subscriptions create relaunch-dead-letter-inspect --topic relaunch-dead-letter \
  --message-retention-duration 7d
binding "pubsub topics" relaunch-dead-letter "serviceAccount:$PUBSUB_AGENT" roles/pubsub.publisher

# Vertex job service messages -> Pub/Sub, as LogEntry JSON.
ensure "sink:relaunch-vertex-jobs" g logging sinks describe relaunch-vertex-jobs --format='value(name)' \
  -- g logging sinks create relaunch-vertex-jobs "pubsub.googleapis.com/projects/$PROJECT/topics/vertex-job-events" \
  --log-filter 'resource.type="ml_job" AND resource.labels.task_name="service"'
if [[ $DRY_RUN == 1 ]]; then
  WRITER="serviceAccount:sink-writer@example.iam.gserviceaccount.com"
else
  WRITER=$(g logging sinks describe relaunch-vertex-jobs --format='value(writerIdentity)')
fi
binding "pubsub topics" vertex-job-events "$WRITER" roles/pubsub.publisher

for role in roles/aiplatform.user roles/pubsub.subscriber roles/pubsub.publisher roles/logging.logWriter roles/monitoring.metricWriter; do
  binding projects "$PROJECT" "serviceAccount:$CTL" "$role" --condition=None
done
binding "storage buckets" "$STATE_BUCKET" "serviceAccount:$CTL" roles/storage.objectAdmin
binding "iam service-accounts" "$TRAINER" "serviceAccount:$CTL" roles/iam.serviceAccountUser

# Checkpoint buckets: the controller reads checkpoints and exit records to decide where to resume;
# the trainer writes them.
IFS=',' read -r -a CHECKPOINT_BUCKETS <<<"${RELAUNCH_CHECKPOINT_BUCKETS:-}"
for bucket in "${CHECKPOINT_BUCKETS[@]}"; do
  bucket=${bucket// /}
  bucket=${bucket#gs://}
  [[ -n $bucket ]] || continue
  binding "storage buckets" "gs://$bucket" "serviceAccount:$CTL" roles/storage.objectViewer
  binding "storage buckets" "gs://$bucket" "serviceAccount:$TRAINER" roles/storage.objectAdmin
done
if [[ ${#CHECKPOINT_BUCKETS[@]} -eq 0 ]]; then
  echo "warning: RELAUNCH_CHECKPOINT_BUCKETS is empty: the controller cannot read any checkpoint bucket" >&2
fi

# --- the controller service -----------------------------------------------------------------
sed -e "s|PROJECT|$PROJECT|g" -e "s|REGION|$REGION|g" -e "s|IMAGE|$IMAGE|g" \
  -e "s|CHECKPOINT_BUCKETS_VALUE|${RELAUNCH_CHECKPOINT_BUCKETS:-}|g" "$HERE/cloudrun.yaml" >"$WORK/cloudrun.yaml"
if exists "service:relaunch-controller" g run services describe relaunch-controller --region "$REGION" --format='value(metadata.name)'; then
  echo "= exists: service:relaunch-controller"
  if [[ $UPDATE_SERVICE == 1 ]]; then
    run g run services replace "$WORK/cloudrun.yaml" --region "$REGION"
  fi
else
  run g run services replace "$WORK/cloudrun.yaml" --region "$REGION"
  if [[ $DRY_RUN == 1 && -n $FAKE_STATE ]]; then echo "service:relaunch-controller" >>"$FAKE_STATE"; fi
fi
binding "run services" relaunch-controller "serviceAccount:$PUSH" roles/run.invoker --region "$REGION"

# --- paging -----------------------------------------------------------------------------------
CHANNELS=()
channel() {
  local name=$1 type=$2 label=$3
  local id="channel:$name"
  if ! exists "$id" g beta monitoring channels list --filter="displayName=\"$name\"" --format='value(name)'; then
    run g beta monitoring channels create --display-name "$name" --type "$type" --channel-labels "$label"
    if [[ $DRY_RUN == 1 && -n $FAKE_STATE ]]; then echo "$id" >>"$FAKE_STATE"; fi
  else
    echo "= exists: $id"
  fi
  if [[ $DRY_RUN == 1 ]]; then
    CHANNELS+=("projects/$PROJECT/notificationChannels/${type}-channel")
  else
    CHANNELS+=("$(g beta monitoring channels list --filter="displayName=\"$name\"" --format='value(name)' | head -n1)")
  fi
}
if [[ -n ${RELAUNCH_ALERT_EMAIL:-} ]]; then
  channel "Relaunch e-mail" email "email_address=$RELAUNCH_ALERT_EMAIL"
fi
if [[ -n ${RELAUNCH_ALERT_WEBHOOK_URL:-} ]]; then
  channel "Relaunch webhook" webhook_tokenauth "url=$RELAUNCH_ALERT_WEBHOOK_URL"
fi
if [[ ${#CHANNELS[@]} -eq 0 ]]; then
  echo "warning: no RELAUNCH_ALERT_EMAIL or RELAUNCH_ALERT_WEBHOOK_URL: alert policies will page nobody" >&2
fi
CHANNEL_LIST=$(IFS=','; echo "${CHANNELS[*]}")

# alert-policies.yaml holds one policy per YAML document; gcloud takes one per file. A policy is
# found by its display name, so a re-run never duplicates it.
csplit -s -z -f "$WORK/policy-" "$HERE/alert-policies.yaml" '/^---$/' '{*}'
for policy in "$WORK"/policy-*; do
  name=$(sed -n 's/^displayName: "\(.*\)"$/\1/p' "$policy" | head -n1)
  [[ -n $name ]] || { echo "setup.sh: no displayName in $policy" >&2; exit 1; }
  args=(--policy-from-file "$policy")
  if [[ -n $CHANNEL_LIST ]]; then args+=(--notification-channels "$CHANNEL_LIST"); fi
  ensure "policy:$name" g alpha monitoring policies list --filter="displayName=\"$name\"" --format='value(name)' \
    -- g alpha monitoring policies create "${args[@]}"
done

if [[ $CREATED == 0 ]]; then
  echo "nothing to do: every resource exists"
elif [[ $DRY_RUN == 1 ]]; then
  echo "dry run: $CREATED change(s) shown above, none made"
else
  echo "done: $CREATED change(s). Set serviceAccount: $TRAINER in job specs."
fi
