#!/usr/bin/env bash
# Create everything Relaunch needs in a Google Cloud project, from an empty one to the running
# controller (deploy/README.md walks through it).
#
#   deploy/setup.sh [--dry-run] [--out DIR] [--update-service] PROJECT REGION
#   deploy/setup.sh --help
#
#   --dry-run         print every command, change nothing; "exists?" is answered by a fake-state
#                     file (DIR/fake-state unless RELAUNCH_DEPLOY_FAKE_STATE names one), and what
#                     the run would create is added to it: a second dry run shows what a re-run does
#   --out DIR         where the rendered files go (Cloud Run service, alert policies, the
#                     permission request); kept, so printed commands can be pasted.
#                     Default: ${TMPDIR:-/tmp}/relaunch-deploy-PROJECT
#   --update-service  replace an existing Cloud Run service with the rendered one (new image, env)
#
# Settings (environment):
#   RELAUNCH_SUBMITTERS           comma-separated members who submit jobs, e.g.
#                                 group:ml-team@example.com,user:ann@example.com: publisher on the
#                                 requests topic, object viewer on the state bucket, invoker of the
#                                 service (status page and /v1/jobs)
#   RELAUNCH_SUBMITTERS_READ_LOGS true: also roles/logging.viewer on the project (`relaunch logs`)
#   RELAUNCH_CHECKPOINT_BUCKETS   comma-separated checkpoint buckets (names, no gs://): the controller
#                                 reads them, relaunch-trainer writes them
#   RELAUNCH_TRAINER_SERVICE_ACCOUNTS  comma-separated service-account emails that job specs name
#                                 (jobSpec.serviceAccount) besides relaunch-trainer: the controller
#                                 may act as each
#   RELAUNCH_IMAGE_TAG            tag of both images (default: the checkout's git commit)
#   RELAUNCH_INGRESS              Cloud Run ingress: all (default) or internal (see deploy/README.md)
#   RELAUNCH_ALERT_EMAIL          e-mail address the alert policies notify
#   RELAUNCH_ALERT_WEBHOOK_URL    webhook URL the alert policies notify
#
# Idempotent: every resource is looked up first and created only when missing; an IAM binding is
# added only when absent. Any other failure stops the script at once. It starts by checking that
# you hold every permission it needs, and names each one you lack.

set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=deploy/lib.sh
. "$HERE/lib.sh"

UPDATE_SERVICE=0
POSITIONAL=()
while [[ $# -gt 0 ]]; do
  case $1 in
    -h | --help) usage_from "$0"; exit 0 ;;
    --dry-run) DRY_RUN=1 ;;
    --update-service) UPDATE_SERVICE=1 ;;
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
INGRESS=${RELAUNCH_INGRESS:-all}
case $INGRESS in
  all | internal | internal-and-cloud-load-balancing) ;;
  *) fail_usage "$0" "RELAUNCH_INGRESS must be all, internal or internal-and-cloud-load-balancing, not '$INGRESS'" ;;
esac
setup_names "${POSITIONAL[0]}" "${POSITIONAL[1]}"
REPO_ROOT=$(cd "$HERE/.." && pwd)
TAG=${RELAUNCH_IMAGE_TAG:-$(git -C "$REPO_ROOT" rev-parse --short=12 HEAD 2>/dev/null || echo latest)}
CONTROLLER_IMAGE=$REGISTRY/controller:$TAG
TRAINER_IMAGE=$REGISTRY/trainer:$TAG
echo "rendered files: $OUT"
[[ $DRY_RUN == 0 ]] || echo "fake state: $FAKE_STATE (empty = a fresh project)"

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
    fake_add "$id"
  fi
}

# binding KIND TARGET MEMBER ROLE [WHERE...]: add an IAM binding unless present.
# KIND is a gcloud group whose get-iam-policy / add-iam-policy-binding take TARGET (and WHERE,
# e.g. --region R).
binding() {
  local kind=$1 target=$2 member=$3 role=$4
  shift 4
  local -a group condition=()
  read -r -a group <<<"$kind"
  # A project binding names its (absent) IAM condition, or gcloud asks which one is meant.
  if [[ $kind == projects ]]; then condition=(--condition=None); fi
  ensure "binding:$kind:$target:$member:$role" --want "$role $member" \
    g "${group[@]}" get-iam-policy "$target" "$@" "${BINDING_LOOKUP[@]}" \
    -- g "${group[@]}" add-iam-policy-binding "$target" "$@" --member "$member" --role "$role" \
    "${condition[@]}"
}

# --- 1. who runs this, and the project --------------------------------------------------------
check_permissions setup
if [[ $DRY_RUN == 1 ]]; then
  PROJECT_NUMBER=000000000000
else
  PROJECT_NUMBER=$(g projects describe "$PROJECT" --format='value(projectNumber)')
fi

# --- 2. APIs (a fresh project has none of these enabled) ---------------------------------------
for api in "${APIS[@]}"; do
  ensure "api:$api" g services list --enabled --filter="config.name=$api" --format='value(config.name)' \
    -- g services enable "$api"
done
# Enabling Pub/Sub creates its service agent, which dead-lettering needs.
PUBSUB_AGENT=service-$PROJECT_NUMBER@gcp-sa-pubsub.iam.gserviceaccount.com

# --- 3. identities, storage, the image repository ----------------------------------------------
for sa in "${SERVICE_ACCOUNTS[@]}"; do
  ensure "sa:$sa" g iam service-accounts describe "$sa@$PROJECT.iam.gserviceaccount.com" --format='value(email)' \
    -- g iam service-accounts create "$sa" --display-name "$sa"
done
for bucket in "$STATE_BUCKET" "$BUILD_BUCKET"; do
  ensure "bucket:$bucket" g storage buckets describe "$bucket" --format='value(name)' \
    -- g storage buckets create "$bucket" --location "$REGION" --uniform-bucket-level-access \
    --public-access-prevention
done
ensure "repository:$REPOSITORY" g artifacts repositories describe "$REPOSITORY" --location "$REGION" --format='value(name)' \
  -- g artifacts repositories create "$REPOSITORY" --repository-format docker --location "$REGION" \
  --description "Relaunch controller and trainer images"

# --- 4. both images, built by Cloud Build from this checkout ------------------------------------
# A dedicated build identity: it reads the uploaded source, pushes to the repository, writes logs.
binding "storage buckets" "$BUILD_BUCKET" "serviceAccount:$BUILDER" roles/storage.objectViewer
binding "artifacts repositories" "$REPOSITORY" "serviceAccount:$BUILDER" roles/artifactregistry.writer --location "$REGION"
binding projects "$PROJECT" "serviceAccount:$BUILDER" roles/logging.logWriter
if exists "image:trainer:$TAG" g artifacts docker images describe "$TRAINER_IMAGE" --format='value(image_summary.digest)' &&
  exists "image:controller:$TAG" g artifacts docker images describe "$CONTROLLER_IMAGE" --format='value(image_summary.digest)'; then
  echo "= exists: images $TAG"
else
  run g builds submit "$REPO_ROOT" --config "$HERE/cloudbuild.yaml" --region "$REGION" \
    --service-account "projects/$PROJECT/serviceAccounts/$BUILDER" \
    --gcs-source-staging-dir "$BUILD_BUCKET/source" \
    --substitutions "_CONTROLLER_IMAGE=$CONTROLLER_IMAGE,_TRAINER_IMAGE=$TRAINER_IMAGE"
  fake_add "image:trainer:$TAG"
  fake_add "image:controller:$TAG"
fi

# --- 5. topics and subscriptions -----------------------------------------------------------------
for topic in "${TOPICS[@]}"; do
  ensure "topic:$topic" g pubsub topics describe "$topic" --format='value(name)' \
    -- g pubsub topics create "$topic"
done
# Both controller subscriptions back off between redeliveries and dead-letter a message that
# keeps failing, so nothing loops for ever. Requests get Pub/Sub's maximum of 100 deliveries: the
# controller acks every request it can record, so a request fails only when the controller
# holding it dies, and one crash costs every message in flight a delivery. A log entry is only a
# hint (the reconcile pass is the safety net): 5.
for triple in "${CONTROLLER_SUBSCRIPTIONS[@]}"; do
  sub=${triple%%:*} rest=${triple#*:} topic=${rest%%:*} attempts=${triple##*:}
  ensure "sub:$sub" g pubsub subscriptions describe "$sub" --format='value(name)' \
    -- g pubsub subscriptions create "$sub" --topic "$topic" --ack-deadline 60 \
    --dead-letter-topic relaunch-dead-letter --max-delivery-attempts "$attempts" \
    --min-retry-delay 10s --max-retry-delay 600s
  # Dead-lettering needs the Pub/Sub service agent to consume from the subscription.
  binding "pubsub subscriptions" "$sub" "serviceAccount:$PUBSUB_AGENT" roles/pubsub.subscriber
done
# An unattached dead-letter topic would drop what it receives: keep a subscription on it.
ensure "sub:$DEAD_LETTER_INSPECT" g pubsub subscriptions describe "$DEAD_LETTER_INSPECT" --format='value(name)' \
  -- g pubsub subscriptions create "$DEAD_LETTER_INSPECT" --topic relaunch-dead-letter \
  --message-retention-duration 7d
binding "pubsub topics" relaunch-dead-letter "serviceAccount:$PUBSUB_AGENT" roles/pubsub.publisher

# --- 6. Vertex job service messages -> Pub/Sub, as LogEntry JSON ---------------------------------
ensure "sink:$SINK" g logging sinks describe "$SINK" --format='value(name)' \
  -- g logging sinks create "$SINK" "pubsub.googleapis.com/projects/$PROJECT/topics/vertex-job-events" \
  --log-filter 'resource.type="ml_job" AND resource.labels.task_name="service"'
if [[ $DRY_RUN == 1 ]]; then
  WRITER="serviceAccount:sink-writer@example.iam.gserviceaccount.com"
else
  WRITER=$(g logging sinks describe "$SINK" --format='value(writerIdentity)')
fi
binding "pubsub topics" vertex-job-events "$WRITER" roles/pubsub.publisher

# --- 7. what the controller may do ---------------------------------------------------------------
for role in "${CONTROLLER_PROJECT_ROLES[@]}"; do
  binding projects "$PROJECT" "serviceAccount:$CTL" "$role"
done
binding "storage buckets" "$STATE_BUCKET" "serviceAccount:$CTL" roles/storage.objectAdmin
# Creating a CustomJob that runs as a service account needs iam.serviceAccounts.actAs on it.
mapfile -t EXTRA_TRAINERS < <(split_list "${RELAUNCH_TRAINER_SERVICE_ACCOUNTS:-}")
for account in "$TRAINER" "${EXTRA_TRAINERS[@]}"; do
  binding "iam service-accounts" "$account" "serviceAccount:$CTL" roles/iam.serviceAccountUser
done
# Checkpoint buckets: the controller reads checkpoints and exit records to decide where to resume;
# the trainer writes them.
mapfile -t CHECKPOINT_BUCKETS < <(split_list "${RELAUNCH_CHECKPOINT_BUCKETS:-}")
for bucket in "${CHECKPOINT_BUCKETS[@]}"; do
  bucket=${bucket#gs://}
  binding "storage buckets" "gs://$bucket" "serviceAccount:$CTL" roles/storage.objectViewer
  binding "storage buckets" "gs://$bucket" "serviceAccount:$TRAINER" roles/storage.objectAdmin
done
if [[ ${#CHECKPOINT_BUCKETS[@]} -eq 0 ]]; then
  echo "warning: RELAUNCH_CHECKPOINT_BUCKETS is empty: the controller cannot read any checkpoint bucket" >&2
fi

# --- 8. the controller service ---------------------------------------------------------------------
BUCKET_NAMES=$(printf '%s,' "${CHECKPOINT_BUCKETS[@]#gs://}")
sed -e "s|PROJECT|$PROJECT|g" -e "s|REGION|$REGION|g" -e "s|IMAGE|$CONTROLLER_IMAGE|g" \
  -e "s|INGRESS_SETTING|$INGRESS|g" -e "s|CHECKPOINT_BUCKETS_VALUE|${BUCKET_NAMES%,}|g" \
  "$HERE/cloudrun.yaml" >"$OUT/cloudrun.yaml"
if exists "service:$SERVICE" g run services describe "$SERVICE" --region "$REGION" --format='value(metadata.name)'; then
  echo "= exists: service:$SERVICE"
  if [[ $UPDATE_SERVICE == 1 ]]; then
    run g run services replace "$OUT/cloudrun.yaml" --region "$REGION"
  fi
else
  run g run services replace "$OUT/cloudrun.yaml" --region "$REGION"
  fake_add "service:$SERVICE"
fi
# Pub/Sub push (when enabled, deploy/README.md) authenticates as relaunch-push.
binding "run services" "$SERVICE" "serviceAccount:$PUSH" roles/run.invoker --region "$REGION"

# --- 9. the people who submit jobs -------------------------------------------------------------------
mapfile -t SUBMITTERS < <(split_list "${RELAUNCH_SUBMITTERS:-}")
for member in "${SUBMITTERS[@]}"; do
  if [[ ! $member =~ ^(user|group|serviceAccount|domain):.+ ]]; then
    echo "RELAUNCH_SUBMITTERS: '$member' is not a member (user:EMAIL, group:EMAIL, serviceAccount:EMAIL or domain:DOMAIN)" >&2
    exit 2
  fi
  binding "pubsub topics" relaunch-requests "$member" roles/pubsub.publisher
  binding "storage buckets" "$STATE_BUCKET" "$member" roles/storage.objectViewer
  binding "run services" "$SERVICE" "$member" roles/run.invoker --region "$REGION"
  if [[ ${RELAUNCH_SUBMITTERS_READ_LOGS:-false} == true ]]; then
    binding projects "$PROJECT" "$member" roles/logging.viewer
  fi
done
if [[ ${#SUBMITTERS[@]} -eq 0 ]]; then
  echo "warning: RELAUNCH_SUBMITTERS is empty: only project owners can submit jobs" >&2
fi

# --- 10. paging ----------------------------------------------------------------------------------------
CHANNELS=()
channel() {
  local name=$1 type=$2 label=$3
  local id="channel:$name"
  local -a lookup=(g beta monitoring channels list --filter="displayName=\"$name\"" --format='value(name)')
  if exists "$id" "${lookup[@]}"; then
    echo "= exists: $id"
  else
    run g beta monitoring channels create --display-name "$name" --type "$type" --channel-labels "$label"
    fake_add "$id"
  fi
  if [[ $DRY_RUN == 1 ]]; then
    CHANNELS+=("projects/$PROJECT/notificationChannels/${type}-channel")
  else
    CHANNELS+=("$("${lookup[@]}" | head -n1)")
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
rm -f "$OUT"/policy-*
csplit -s -z -f "$OUT/policy-" -b '%02d.yaml' "$HERE/alert-policies.yaml" '/^---$/' '{*}'
for policy in "$OUT"/policy-*.yaml; do
  name=$(sed -n 's/^displayName: "\(.*\)"$/\1/p' "$policy" | head -n1)
  [[ -n $name ]] || { echo "setup.sh: no displayName in $policy" >&2; exit 1; }
  args=(--policy-from-file "$policy")
  if [[ -n $CHANNEL_LIST ]]; then args+=(--notification-channels "$CHANNEL_LIST"); fi
  ensure "policy:$name" g alpha monitoring policies list --filter="displayName=\"$name\"" --format='value(name)' \
    -- g alpha monitoring policies create "${args[@]}"
done

if [[ $CHANGES == 0 ]]; then
  echo "nothing to do: every resource exists"
elif [[ $DRY_RUN == 1 ]]; then
  echo "dry run: $CHANGES change(s) shown above, none made"
else
  echo "done: $CHANGES change(s). Set serviceAccount: $TRAINER and imageUri: $TRAINER_IMAGE (or an image built on it) in job specs."
fi
