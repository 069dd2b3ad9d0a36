{{/*
Names and labels. With the release named after the chart (`helm install runnerpool-operator`)
every name is the one deploy/ uses.
*/}}

{{- define "runnerpool-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "runnerpool-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "runnerpool-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "runnerpool-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Labels on every object: deploy/'s two, plus Helm's bookkeeping. */}}
{{- define "runnerpool-operator.labels" -}}
app.kubernetes.io/name: {{ include "runnerpool-operator.name" . }}
app.kubernetes.io/part-of: runnerpool
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* What selects the operator's pods (immutable on a Deployment: never add to it). */}}
{{- define "runnerpool-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "runnerpool-operator.name" . }}
app.kubernetes.io/component: operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* What selects the webhook receiver's pods (immutable on a Deployment: never add to it). */}}
{{- define "runnerpool-operator.receiverSelectorLabels" -}}
app.kubernetes.io/name: {{ include "runnerpool-operator.name" . }}
app.kubernetes.io/component: webhook-receiver
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The webhook receiver's Deployment, Services and roles (runnerpool/webhook_component.py). */}}
{{- define "runnerpool-operator.receiverName" -}}
{{- printf "%s-webhook" (include "runnerpool-operator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The webhook receiver's ServiceAccount: its own, never the operator's (the receiver parses
requests from the internet and must hold no credential; docs/security.md). Made by the chart
(serviceAccount.webhookName, else <fullname>-webhook), or, with serviceAccount.create=false,
brought like the operator's: its name is then required, or the receiver's pods would name an
account nobody made and never start.
*/}}
{{- define "runnerpool-operator.receiverServiceAccountName" -}}
{{- $operator := include "runnerpool-operator.serviceAccountName" . }}
{{- $name := default (include "runnerpool-operator.receiverName" .) .Values.serviceAccount.webhookName }}
{{- if not .Values.serviceAccount.create }}
{{- $name = required "serviceAccount.webhookName is required when serviceAccount.create is false: create a ServiceAccount of its own for the webhook receiver in the release namespace (not the operator's: the receiver must hold no credential) and name it here" .Values.serviceAccount.webhookName }}
{{- end }}
{{- if eq $name $operator }}
{{- fail "serviceAccount.webhookName must differ from the operator's account: the webhook receiver parses requests from the internet and must not hold the operator's permissions" }}
{{- end }}
{{- $name }}
{{- end }}

{{/* The Secret into which the operator copies the pools' own webhook secrets for the receiver. */}}
{{- define "runnerpool-operator.mirrorSecretName" -}}
{{- printf "%s-webhook-pool-secrets" (include "runnerpool-operator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The leader-election Lease: leaderElection.leaseName, else the release's full name, which for
the release named after the chart is "runnerpool-operator", deploy/'s Lease and the operator's
default --leader-election-id (tests/test_chart.py checks they agree).
*/}}
{{- define "runnerpool-operator.leaseName" -}}
{{- default (include "runnerpool-operator.fullname" .) .Values.leaderElection.leaseName | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The ClusterRole a RoleBinding in a runner namespace enables the operator with: rbac.yaml makes it
under this name and the operator's --namespace-role names it, so the line in a
NamespaceNotEnabled condition binds a role that exists, whatever the release is called. Cluster
mode: <fullname>-namespace (its writes there); watchNamespaces: <fullname>-namespaced (its reads
and writes there, as deploy/overlays/namespaced's runnerpool-operator-namespaced).
*/}}
{{- define "runnerpool-operator.namespaceRoleName" -}}
{{- printf "%s-%s" (include "runnerpool-operator.fullname" .) (ternary "namespaced" "namespace" (not (empty .Values.watchNamespaces))) }}
{{- end }}

{{/*
"true" when the operator gets a PodDisruptionBudget: podDisruptionBudget.enabled and more than
one replica. A single replica has no budget that helps: minAvailable 1 would block every node
drain, and one it can satisfy (minAvailable 0, maxUnavailable 1) allows every eviction, i.e.
protects nothing. It gets none (so replicaCount=1 installs with the defaults), as the webhook
receiver's single replica does; the standby replica of replicaCount 2 is the protection.
*/}}
{{- define "runnerpool-operator.budgeted" -}}
{{- if and .Values.podDisruptionBudget.enabled (gt (int .Values.replicaCount) 1) }}true{{ end }}
{{- end }}

{{/* repository:tag, or repository@digest; the tag defaults to the chart's appVersion. */}}
{{- define "runnerpool-operator.imageRef" -}}
{{- $image := index . 0 }}
{{- $appVersion := index . 1 }}
{{- if $image.digest }}
{{- printf "%s@%s" $image.repository $image.digest }}
{{- else }}
{{- printf "%s:%s" $image.repository (default $appVersion $image.tag | toString) }}
{{- end }}
{{- end }}

{{/*
The rules of a Role or ClusterRole in files/: links to deploy/rbac/, so that the chart and
`kubectl apply -k deploy/` can never grant different things. Call with (list . "files/NAME.yaml").
*/}}
{{- define "runnerpool-operator.rules" -}}
{{- $root := index . 0 }}
{{- $file := index . 1 }}
{{- $role := $root.Files.Get $file | fromYaml }}
{{- if not $role.rules }}
{{- fail (printf "%s has no rules: it must link to the same file in deploy/rbac/" $file) }}
{{- end }}
{{- toYaml $role.rules }}
{{- end }}

{{/*
Resources a RoleBinding cannot grant (they are not namespaced): with watchNamespaces, rules on
only these go to a ClusterRole bound cluster-wide, the rest to one bound in each watched
namespace only.
*/}}
{{- define "runnerpool-operator.clusterScopedResources" -}}
- namespaces
- tokenreviews
- subjectaccessreviews
{{- end }}

{{/* "cluster" or "namespaced": which half of the rules a rule belongs to. */}}
{{- define "runnerpool-operator.ruleScope" -}}
{{- $clusterScoped := include "runnerpool-operator.clusterScopedResources" . | fromYamlArray }}
{{- $cluster := list }}
{{- $namespaced := list }}
{{- range .rule.resources }}
{{- if has . $clusterScoped }}
{{- $cluster = append $cluster . }}
{{- else }}
{{- $namespaced = append $namespaced . }}
{{- end }}
{{- end }}
{{- if and $cluster $namespaced }}
{{- fail (printf "a rule of files/cluster_role.yaml mixes cluster-scoped %v with namespaced %v: split it so that watchNamespaces can put each half where it works" $cluster $namespaced) }}
{{- end }}
{{- ternary "namespaced" "cluster" (gt (len $namespaced) 0) }}
{{- end }}

{{/*
A ClusterRole of deploy/rbac (linked into files/): its rules and its own labels (aggregation),
named after the release instead of "runnerpool-operator", with the chart's labels.
*/}}
{{- define "runnerpool-operator.linkedClusterRole" -}}
{{- $root := index . 0 }}
{{- $role := index . 1 }}
{{- if not $role.rules }}
{{- fail "a linked ClusterRole has no rules: it must link to its file in deploy/rbac/" }}
{{- end }}
{{- $labels := merge (include "runnerpool-operator.labels" $root | fromYaml) ($role.metadata.labels | default dict) }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ include "runnerpool-operator.fullname" $root }}{{ trimPrefix "runnerpool-operator" $role.metadata.name }}
  labels:
    {{- toYaml $labels | nindent 4 }}
rules:
  {{- toYaml $role.rules | nindent 2 }}
{{- end }}

{{/*
The Secret with the metrics endpoints' tls.crt and tls.key (and ca.crt, which the ServiceMonitor
verifies with): the one cert-manager writes for metrics.certManager, else metrics.certSecret;
empty: the operator makes a self-signed certificate in memory. Only with metrics.secure.
*/}}
{{- define "runnerpool-operator.metricsCertSecret" -}}
{{- if .Values.metrics.secure }}
{{- if .Values.metrics.certManager.enabled }}
{{- printf "%s-metrics-cert" (include "runnerpool-operator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- .Values.metrics.certSecret }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Where both components serve /metrics (--metrics-bind-address): metrics.bindAddress when set;
else 0.0.0.0 with metrics.secure (every scrape's token reviewed) and 127.0.0.1 without it, as
deploy/overlays/namespaced does: plain-HTTP metrics on a pod address would let any pod in the
cluster, a tenant's job in a runner pod included, read every pool, namespace, repository and
workflow name in them. The ServiceMonitor cannot reach loopback: servicemonitor.yaml refuses that.
*/}}
{{- define "runnerpool-operator.metricsBindAddress" -}}
{{- .Values.metrics.bindAddress | default (ternary "0.0.0.0" "127.0.0.1" .Values.metrics.secure) }}
{{- end }}

{{/* The metrics-reader ClusterRole's name (deploy/rbac/metrics_reader_role.yaml's, per release). */}}
{{- define "runnerpool-operator.metricsReaderRole" -}}
{{- printf "%s-metrics-reader" (include "runnerpool-operator.fullname" .) }}
{{- end }}

{{/* The ServiceAccount whose token the ServiceMonitor sends, when the chart makes it. */}}
{{- define "runnerpool-operator.metricsScraperName" -}}
{{- printf "%s-metrics-scraper" (include "runnerpool-operator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The job metrics' labels and cap: the operator (the poller) and the webhook receivers both
observe jobs, so both get the same flags.
*/}}
{{- define "runnerpool-operator.jobMetricsArgs" -}}
- --job-metrics-labels={{ .Values.jobMetrics.labels }}
- --job-metrics-max-label-sets={{ .Values.jobMetrics.maxLabelSetsPerPool }}
{{- end }}

{{/*
The operator's own CA bundle and proxy for GitHub (values githubServerTLS and proxy): env of the
operator container. Proxy credentials come from the Secret through env and $(VAR) expansion,
never into the rendered manifest.
*/}}
{{- define "runnerpool-operator.githubConnectionEnv" -}}
{{- if .Values.githubServerTLS.configMapName }}
- name: REQUESTS_CA_BUNDLE
  value: /etc/runnerpool/github-ca/ca.crt
{{- end }}
{{- $secret := .Values.proxy.credentialSecretName }}
{{- if $secret }}
- name: RUNNERPOOL_PROXY_USERNAME
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: username
- name: RUNNERPOOL_PROXY_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: password
{{- end }}
{{- range $name, $url := dict "HTTP_PROXY" .Values.proxy.http "HTTPS_PROXY" .Values.proxy.https }}
{{- if $url }}
{{- $value := $url }}
{{- if $secret }}
{{- $parts := splitn "://" 2 $url }}
{{- $value = printf "%s://$(RUNNERPOOL_PROXY_USERNAME):$(RUNNERPOOL_PROXY_PASSWORD)@%s" $parts._0 $parts._1 }}
{{- end }}
- name: {{ $name }}
  value: {{ $value | quote }}
{{- end }}
{{- end }}
{{- with .Values.proxy.noProxy }}
- name: NO_PROXY
  value: {{ join "," . | quote }}
{{- end }}
{{- end }}
