{{/* The chart's name (app.kubernetes.io/name). */}}
{{- define "maintd.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The name of every object: the release's when it contains the chart's name
(a release named maintd gets deploy/'s names), else "<release>-<chart>".
*/}}
{{- define "maintd.fullname" -}}
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

{{- define "maintd.serviceAccountName" -}}
{{- default (include "maintd.fullname" .) .Values.serviceAccount.name }}
{{- end }}

{{/* What selects the release's pods: never changes over upgrades. */}}
{{- define "maintd.selectorLabels" -}}
app.kubernetes.io/name: {{ include "maintd.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "maintd.labels" -}}
{{ include "maintd.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "maintd.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* Whether the agent's read-only endpoint listens on the node's address. */}}
{{- define "maintd.onNodeAddress" -}}
{{- if or .Values.agent.listenOnNodeAddress .Values.prometheus.podMonitor.enabled }}true{{ end }}
{{- end }}
