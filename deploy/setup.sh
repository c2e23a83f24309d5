#!/usr/bin/env bash
# Create Relaunch's Google Cloud resources. Usage: deploy/setup.sh PROJECT REGION [IMAGE]
# Idempotent: "already exists" is not an error.
set -euo pipefail
PROJECT=${1:?project}; REGION=${2:?region}
IMAGE=${3:-$REGION-docker.pkg.dev/$PROJECT/relaunch/controller:latest}
STATE_BUCKET=gs://$PROJECT-relaunch-state
CTL=relaunch-controller@$PROJECT.iam.gserviceaccount.com
PUSH=relaunch-push@$PROJECT.iam.gserviceaccount.com
TRAINER=relaunch-trainer@$PROJECT.iam.gserviceaccount.com
PROJECT_NUMBER=$(gcloud projects describe "$PROJECT" --format='value(projectNumber)')
PUBSUB_AGENT=service-$PROJECT_NUMBER@gcp-sa-pubsub.iam.gserviceaccount.com
g() { gcloud --project "$PROJECT" "$@" 2>&1 | grep -v "already exists" || true; }

for sa in relaunch-controller relaunch-push relaunch-trainer; do
  g iam service-accounts create "$sa" --display-name "$sa"
done
g storage buckets create "$STATE_BUCKET" --location "$REGION" --uniform-bucket-level-access

for topic in relaunch-requests vertex-job-events relaunch-alerts relaunch-dead-letter; do
  g pubsub topics create "$topic"
done
g pubsub subscriptions create relaunch-requests-controller --topic relaunch-requests \
  --ack-deadline 60 --dead-letter-topic relaunch-dead-letter --max-delivery-attempts 5 \
  --min-retry-delay 10s --max-retry-delay 600s
g pubsub subscriptions create vertex-job-events-controller --topic vertex-job-events --ack-deadline 60
g pubsub subscriptions create relaunch-dead-letter-inspect --topic relaunch-dead-letter

# The Pub/Sub service agent must be able to move poison messages to the dead-letter topic.
g pubsub topics add-iam-policy-binding relaunch-dead-letter --member "serviceAccount:$PUBSUB_AGENT" --role roles/pubsub.publisher
g pubsub subscriptions add-iam-policy-binding relaunch-requests-controller --member "serviceAccount:$PUBSUB_AGENT" --role roles/pubsub.subscriber

# Vertex job service messages -> Pub/Sub, as LogEntry JSON.
g logging sinks create relaunch-vertex-jobs "pubsub.googleapis.com/projects/$PROJECT/topics/vertex-job-events" \
  --log-filter 'resource.type="ml_job" AND resource.labels.task_name="service"'
WRITER=$(gcloud --project "$PROJECT" logging sinks describe relaunch-vertex-jobs --format='value(writerIdentity)')
g pubsub topics add-iam-policy-binding vertex-job-events --member "$WRITER" --role roles/pubsub.publisher

for role in roles/aiplatform.user roles/pubsub.subscriber roles/pubsub.publisher roles/logging.logWriter roles/monitoring.metricWriter; do
  g projects add-iam-policy-binding "$PROJECT" --member "serviceAccount:$CTL" --role "$role" --condition None
done
g storage buckets add-iam-policy-binding "$STATE_BUCKET" --member "serviceAccount:$CTL" --role roles/storage.objectAdmin
g iam service-accounts add-iam-policy-binding "$TRAINER" --member "serviceAccount:$CTL" --role roles/iam.serviceAccountUser

sed -e "s|PROJECT|$PROJECT|g" -e "s|REGION|$REGION|g" -e "s|IMAGE|$IMAGE|g" "$(dirname "$0")/cloudrun.yaml" > /tmp/relaunch-cloudrun.yaml
g run services replace /tmp/relaunch-cloudrun.yaml --region "$REGION"
g run services add-iam-policy-binding relaunch-controller --region "$REGION" --member "serviceAccount:$PUSH" --role roles/run.invoker

# alert-policies.yaml holds one policy per YAML document; gcloud takes one per file.
csplit -s -z -f /tmp/relaunch-policy- "$(dirname "$0")/alert-policies.yaml" '/^---$/' '{*}'
for policy in /tmp/relaunch-policy-*; do
  g alpha monitoring policies create --policy-from-file "$policy"
done
echo "done: grant $TRAINER objectAdmin on your checkpoint buckets and set serviceAccount: $TRAINER in job specs"
