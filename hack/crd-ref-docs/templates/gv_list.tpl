{{- define "gvList" -}}
{{- $groupVersions := . -}}

# API reference: the Go types

*For people who want every field of the GooseAgent API with its type, default and validation.
Generated from `api/v1alpha1` by crd-ref-docs (`make api-docs`); do not edit. The
[API reference](../api.md) explains the fields in use, the conditions and the sidecar's flags.*

## Packages
{{- range $groupVersions }}
- {{ markdownRenderGVLink . }}
{{- end }}

{{ range $groupVersions }}
{{ template "gvDetails" . }}
{{ end }}

{{- end -}}
