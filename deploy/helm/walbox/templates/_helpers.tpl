{{/* Names and labels shared by the templates. */}}

{{- define "walbox.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name, at most 52 characters so that "-shard-NN" and "-migrate" still fit in 63. */}}
{{- define "walbox.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "walbox.selectorLabels" -}}
app.kubernetes.io/name: {{ include "walbox.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "walbox.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "walbox.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "walbox.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "walbox.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "walbox.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/*
The relays to render, as JSON: one {"name", "shard"} per Deployment. Without shards there is one,
named after the release, with an empty shard; with shards > 1 there is one per shard k, named
<fullname>-shard-k.
*/}}
{{- define "walbox.relays" -}}
{{- $full := include "walbox.fullname" . }}
{{- $relays := list }}
{{- $n := int .Values.shards }}
{{- if gt $n 1 }}
{{- range $k := until $n }}
{{- $relays = append $relays (dict "name" (printf "%s-shard-%d" $full $k) "shard" (toString $k)) }}
{{- end }}
{{- else }}
{{- $relays = append $relays (dict "name" $full "shard" "") }}
{{- end }}
{{- toJson $relays }}
{{- end }}

{{/* A comma-separated URL from a string or a list of strings, passed through as is. */}}
{{- define "walbox.joinURL" -}}
{{- if kindIs "slice" . }}{{ join "," . }}{{ else }}{{ . }}{{ end }}
{{- end }}

{{/* Environment of both the relay and the migrate job: the database connection and the names. */}}
{{- define "walbox.databaseEnv" -}}
{{- $url := .url }}
{{- if .urlKey }}
- name: WALBOX_DATABASE_URL_FILE
  value: {{ printf "/etc/walbox/secrets/%s" .urlKey | quote }}
{{- else if $url }}
- name: WALBOX_DATABASE_URL
  value: {{ include "walbox.joinURL" $url | quote }}
{{- end }}
{{- if and .secret .passwordKey }}
- name: WALBOX_DATABASE_PASSWORD_FILE
  value: {{ printf "/etc/walbox/secrets/%s" .passwordKey | quote }}
{{- end }}
- name: WALBOX_SLOT
  value: {{ .root.Values.slot | quote }}
- name: WALBOX_PUBLICATION
  value: {{ .root.Values.publication | quote }}
- name: WALBOX_TABLE
  value: {{ .root.Values.table | quote }}
{{- end }}

{{/* Values that cannot work together fail the render, naming the value. */}}
{{- define "walbox.validate" -}}
{{- if and (or .Values.database.urlKey .Values.amqp.urlKey) (not .Values.secret.name) }}
{{- fail "database.urlKey and amqp.urlKey name keys of secret.name: set secret.name" }}
{{- end }}
{{- if lt (int .Values.shards) 0 }}
{{- fail "shards must be 0 (no sharding) or a number of shards" }}
{{- end }}
{{- if and .Values.amqp.tls.certKey (not .Values.amqp.tls.keyKey) }}
{{- fail "amqp.tls.certKey needs amqp.tls.keyKey" }}
{{- end }}
{{- end }}
