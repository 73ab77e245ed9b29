{{/* The base name of every object. */}}
{{- define "gpu-admission.fullname" -}}
{{- .Values.fullnameOverride | default .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels Helm adds to every object, beside the ones deploy/ sets. */}}
{{- define "gpu-admission.helmLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: gpu-admission
{{- end -}}

{{/* The server's pods: what the Deployment's, Service's, PDB's and NetworkPolicy's selectors match. */}}
{{- define "gpu-admission.selectorLabels" -}}
app.kubernetes.io/name: gpu-admission
app.kubernetes.io/component: webhook
{{- end -}}

{{- define "gpu-admission.tlsSecret" -}}
{{- .Values.certificates.secretName | default (printf "%s-tls" (include "gpu-admission.fullname" .)) -}}
{{- end -}}

{{- define "gpu-admission.policiesConfigMap" -}}
{{- printf "%s-policies" (include "gpu-admission.fullname" .) -}}
{{- end -}}

{{- define "gpu-admission.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/* The Lease names the server's elections use. */}}
{{- define "gpu-admission.reportLease" -}}
{{- printf "%s-report" (include "gpu-admission.fullname" .) -}}
{{- end -}}
{{- define "gpu-admission.certsLease" -}}
{{- printf "%s-certs" (include "gpu-admission.fullname" .) -}}
{{- end -}}

{{/*
The namespaceSelector every namespaced webhook shares: never the listed
namespaces nor the release namespace (no admission deadlock), never a
namespace an admin labelled gpu-admission.io/exempt=true.
*/}}
{{- define "gpu-admission.namespaceSelector" -}}
namespaceSelector:
  matchExpressions:
    - key: kubernetes.io/metadata.name
      operator: NotIn
      values: {{ concat .Values.webhooks.exemptNamespaces (list .Release.Namespace) | uniq | toJson }}
    - key: gpu-admission.io/exempt
      operator: NotIn
      values: ["true"]
{{- end -}}

{{/* clientConfig of a webhook: the Service, the path, and the caBundle in mode secret. */}}
{{- define "gpu-admission.clientConfig" -}}
{{- $ := index . 0 -}}
clientConfig:
  service:
    name: {{ include "gpu-admission.fullname" $ }}
    namespace: {{ $.Release.Namespace }}
    path: {{ index . 1 }}
    port: 443
  {{- if and (eq $.Values.certificates.mode "secret") $.Values.certificates.caBundle }}
  caBundle: {{ $.Values.certificates.caBundle }}
  {{- end }}
{{- end -}}

{{/* Annotations of the webhook configurations (cert-manager's CA injector). */}}
{{- define "gpu-admission.webhookAnnotations" -}}
{{- if eq .Values.certificates.mode "cert-manager" }}
annotations:
  cert-manager.io/inject-ca-from: {{ printf "%s/%s" .Release.Namespace (include "gpu-admission.tlsSecret" .) }}
{{- end }}
{{- end -}}
