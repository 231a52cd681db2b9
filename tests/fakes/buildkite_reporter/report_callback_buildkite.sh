#!/usr/bin/env bash
# Our stand-in for the reference's Buildkite reporter (pytorch/test-infra,
# .github/actions/cross-repo-ci-relay-callback/report_callback_buildkite.sh), written to behave as it does:
# Buildkite's job environment becomes the CI-neutral variables of the callback reporter, a token is minted with
# `buildkite-agent oidc request-token` for the relay's audience, and report_callback.py posts the callback body.
#
# Set by the caller: CALLBACK_URL, CONCLUSION (or BUILDKITE_COMMAND_EXIT_STATUS), STATUS (default completed), and
# for a nightly/periodic self-report DELIVERY_ID_OVERRIDE (the upstream SHA) with EVENT_TYPE_OVERRIDE; for a
# dispatched build CLIENT_PAYLOAD (the repository_dispatch client_payload, JSON).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

export SCHEMA_VERSION="${SCHEMA_VERSION:-1}"
export STATUS="${STATUS:-completed}"
: "${CALLBACK_URL:?set CALLBACK_URL to the /github/callback URL of the relay}"
export CALLBACK_URL

attempt=$(( ${BUILDKITE_RETRY_COUNT:-0} + 1 ))
export RUN_ID="${BUILDKITE_BUILD_ID}"
export RUN_ATTEMPT="${attempt}"
export WORKFLOW_NAME="${BUILDKITE_PIPELINE_SLUG}"
export WORKFLOW_URL="${BUILDKITE_BUILD_URL}"
export JOB_NAME="${BUILDKITE_LABEL:-${BUILDKITE_STEP_KEY:-unknown}}"
export CHECK_RUN_ID="${BUILDKITE_BUILD_ID}-${attempt}"

if [[ -z "${CONCLUSION:-}" && -n "${BUILDKITE_COMMAND_EXIT_STATUS:-}" ]]; then
  if [[ "${BUILDKITE_COMMAND_EXIT_STATUS}" == 0 ]]; then CONCLUSION=success; else CONCLUSION=failure; fi
fi
export CONCLUSION="${CONCLUSION:-}"

OIDC_TOKEN="$(buildkite-agent oidc request-token --audience pytorch-cross-repo-ci-relay --lifetime 300)"
export OIDC_TOKEN

exec python3 "${here}/report_callback.py"
