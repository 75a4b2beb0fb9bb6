{{/* The objects' base name: the release's, with -sandboxd unless it says sandboxd already. */}}
{{- define "sandboxd.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- else if contains "sandboxd" .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-sandboxd" .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* What selects the pods: the kustomize base's two labels, and the release (two releases in one namespace stay apart). */}}
{{- define "sandboxd.selectorLabels" -}}
app.kubernetes.io/name: sandboxd
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: server
{{- end -}}

{{/* Every object's labels. */}}
{{- define "sandboxd.labels" -}}
app.kubernetes.io/name: sandboxd
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "sandboxd.secretName" -}}
{{- .Values.secrets.existingSecret | default (printf "%s-secrets" (include "sandboxd.fullname" .)) -}}
{{- end -}}

{{/* A map without null values, empty maps or empty lists, at every depth (YAML): such a key is left to sandboxd's default. */}}
{{- define "sandboxd.prune" -}}
{{- $out := dict -}}
{{- range $key, $value := . -}}
{{- if kindIs "map" $value -}}
{{- $pruned := include "sandboxd.prune" $value | fromYaml -}}
{{- if $pruned -}}{{- $_ := set $out $key $pruned -}}{{- end -}}
{{- else if kindIs "slice" $value -}}
{{- if $value -}}{{- $_ := set $out $key $value -}}{{- end -}}
{{- else if not (kindIs "invalid" $value) -}}
{{- $_ := set $out $key $value -}}
{{- end -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/* The bucket and PostgreSQL together: several replicas, each container held by one under a lease. */}}
{{- define "sandboxd.clusterMode" -}}
{{- if and (eq (toString .Values.storage.backend) "s3") (eq (toString .Values.metadata.backend) "postgres") -}}true{{- end -}}
{{- end -}}

{{/* The NetworkPolicy peers among external.opensandbox.codeExecution.internal.services (the entries that are not {name, host, port}). */}}
{{- define "sandboxd.networkPeers" -}}
{{- $peers := list -}}
{{- range (((.Values.external).opensandbox).codeExecution).internal.services | default list -}}
{{- if or (hasKey . "namespaceSelector") (hasKey . "podSelector") (hasKey . "ipBlock") -}}
{{- $peers = append $peers . -}}
{{- end -}}
{{- end -}}
{{- toYaml (dict "peers" $peers) -}}
{{- end -}}

{{/* Settings that cannot work are refused here, each with what to change. */}}
{{- define "sandboxd.validate" -}}
{{- $v := .Values -}}
{{- $tier := toString $v.isolation.tier -}}
{{- if not (has $tier (list "native" "gvisor")) -}}
{{- fail (printf "isolation.tier %q is unknown: the tiers are native (Linux namespaces, cgroups and seccomp) and gvisor (the same under gVisor's kernel)" $tier) -}}
{{- end -}}
{{- with ($v.runtime | default dict).isolation -}}
{{- if ne (toString .) $tier -}}
{{- fail (printf "runtime.isolation %q and isolation.tier %q disagree: set isolation.tier only (the chart writes runtime.isolation from it)" (toString .) $tier) -}}
{{- end -}}
{{- end -}}
{{- $platform := toString ($v.isolation.gvisorPlatform | default "ptrace") -}}
{{- if not (has $platform (list "ptrace" "systrap" "kvm")) -}}
{{- fail (printf "isolation.gvisorPlatform %q is unknown: runsc's platforms are ptrace (any node), systrap (runsc from mid-2023) and kvm (/dev/kvm on the node)" $platform) -}}
{{- end -}}
{{- $cluster := include "sandboxd.clusterMode" . -}}
{{- if and (gt (int $v.replicaCount) 1) (not $cluster) -}}
{{- fail (printf "replicaCount %d needs storage.backend: s3 and metadata.backend: postgres: each replica would otherwise keep its own files and metadata, and a request reaching another replica would not find them" (int $v.replicaCount)) -}}
{{- end -}}
{{- if and $v.fileStorage.shared (not $cluster) -}}
{{- fail "fileStorage.shared: true, but sandboxd shares files through the bucket and PostgreSQL, not a shared volume: set storage.backend: s3 and metadata.backend: postgres" -}}
{{- end -}}
{{- $peers := (include "sandboxd.networkPeers" . | fromYaml).peers -}}
{{- if $peers -}}
{{- if not $v.rbac.create -}}
{{- fail "external.opensandbox.codeExecution.internal.services has Kubernetes NetworkPolicy peers, which sandboxd resolves through the Kubernetes API: set rbac.create: true (the read-only account that lists and watches namespaces, pods, Services and EndpointSlices)" -}}
{{- end -}}
{{- if and $v.networkPolicy.enabled (not $v.networkPolicy.apiServerCidrs) -}}
{{- fail "external.opensandbox.codeExecution.internal.services has Kubernetes NetworkPolicy peers, but the pods' NetworkPolicy lets them reach no API server: set networkPolicy.apiServerCidrs (kubectl get endpointslices -n default -l kubernetes.io/service-name=kubernetes)" -}}
{{- end -}}
{{- end -}}
{{- if not $v.secrets.existingSecret -}}
{{- if or (not $v.secrets.authTokens) (not $v.secrets.adminToken) -}}
{{- fail "set secrets.authTokens and secrets.adminToken (or secrets.existingSecret, a Secret with the keys auth-tokens and admin-token)" -}}
{{- end -}}
{{- if and (eq (toString $v.storage.backend) "s3") (or (not $v.secrets.s3AccessKeyId) (not $v.secrets.s3SecretAccessKey)) -}}
{{- fail "storage.backend: s3 needs secrets.s3AccessKeyId and secrets.s3SecretAccessKey (or secrets.existingSecret)" -}}
{{- end -}}
{{- if and (eq (toString $v.metadata.backend) "postgres") (not $v.secrets.postgresUrl) -}}
{{- fail "metadata.backend: postgres needs secrets.postgresUrl (or secrets.existingSecret)" -}}
{{- end -}}
{{- end -}}
{{- if $v.networkPolicy.enabled -}}
{{- if and (eq (toString $v.storage.backend) "s3") (not $v.networkPolicy.bucketCidrs) -}}
{{- fail "storage.backend: s3, but the pods' NetworkPolicy lets them reach no bucket: set networkPolicy.bucketCidrs (or networkPolicy.enabled: false)" -}}
{{- end -}}
{{- if and (eq (toString $v.metadata.backend) "postgres") (not $v.networkPolicy.postgresCidrs) -}}
{{- fail "metadata.backend: postgres, but the pods' NetworkPolicy lets them reach no database: set networkPolicy.postgresCidrs (or networkPolicy.enabled: false)" -}}
{{- end -}}
{{- end -}}
{{- if and $v.executorResourceQuota.enabled (not (kindIs "invalid" $v.opensandbox.runtime.resourceQuota.enabled)) -}}
{{- fail "executorResourceQuota and opensandbox.runtime.resourceQuota are the same quota: set one of them" -}}
{{- end -}}
{{- range $key, $_ := $v.executorResourceQuota.hard -}}
{{- if not (has $key (list "pods" "limits.cpu" "requests.cpu" "limits.memory" "requests.memory")) -}}
{{- fail (printf "executorResourceQuota.hard.%s: sandboxd's quota counts pods, cpu and memory only (pods, limits.cpu or requests.cpu, limits.memory or requests.memory)" $key) -}}
{{- end -}}
{{- end -}}
{{- range $key, $_ := $v.codeInterpreter.kubernetesExecutor -}}
{{- if not (has $key (list "image" "workspaceSizeLimit" "tmpSizeLimit")) -}}
{{- fail (printf "codeInterpreter.kubernetesExecutor.%s: sandboxes are not pods here; the keys taken are image, workspaceSizeLimit and tmpSizeLimit (a sandbox's limits: codeInterpreter.* and opensandbox.runtime.limitRange)" $key) -}}
{{- end -}}
{{- end -}}
{{- $grace := $v.cluster.shutdownGraceSec | default (ternary 60 30 (eq $cluster "true")) | int -}}
{{- if le (int $v.terminationGracePeriodSeconds) (add $grace 10 | int) -}}
{{- fail (printf "terminationGracePeriodSeconds %d must be above cluster.shutdownGraceSec (%d) + 10: the drain, then the process's exit" (int $v.terminationGracePeriodSeconds) $grace) -}}
{{- end -}}
{{- end -}}

{{/* sandboxd's config.yaml: the chart's own keys (listen, dataDir) and the configuration sections of the values, as given, without unset keys. */}}
{{- define "sandboxd.config" -}}
{{- $v := .Values -}}
{{- $config := dict "server" (dict "listen" (printf "0.0.0.0:%d" (int $v.service.port)) "dataDir" "/var/lib/sandboxd") -}}
{{- range $section := list "logging" "features" "external" "opensandbox" "capacity" "quotas" "model" "runtime" "storage" "metadata" "cluster" -}}
{{- $_ := set $config $section (deepCopy (get $v $section | default dict)) -}}
{{- end -}}
{{- $interpreter := omit (deepCopy ($v.codeInterpreter | default dict)) "kubernetesExecutor" -}}
{{- $executor := $v.codeInterpreter.kubernetesExecutor | default dict -}}
{{- range $key := list "workspaceSizeLimit" "tmpSizeLimit" -}}
{{- if hasKey $executor $key -}}{{- $_ := set $interpreter $key (get $executor $key) -}}{{- end -}}
{{- end -}}
{{- $_ := set $config "codeInterpreter" $interpreter -}}
{{- if eq (toString $v.isolation.tier) "gvisor" -}}
{{- $_ := set $config.runtime "isolation" "gvisor" -}}
{{- $_ := set $config.runtime "gvisorPlatform" (toString ($v.isolation.gvisorPlatform | default "ptrace")) -}}
{{- end -}}
{{- if $executor.image -}}
{{- $image := toString $executor.image -}}
{{- $repository := regexReplaceAll ":[^:/]+$" $image "" -}}
{{- $tag := regexFind ":[^:/]+$" $image | trimPrefix ":" | default "latest" -}}
{{- $_ := set $config.external "opensandbox" (mergeOverwrite (dict) ($config.external.opensandbox | default dict) (dict "codeExecution" (mergeOverwrite (dict) (($config.external.opensandbox | default dict).codeExecution | default dict) (dict "image" (dict "repository" $repository "tag" $tag))))) -}}
{{- end -}}
{{- if $v.executorResourceQuota.enabled -}}
{{- $hard := $v.executorResourceQuota.hard | default dict -}}
{{- $quota := dict "enabled" true -}}
{{- with (get $hard "pods") }}{{ $_ := set $quota "pods" (int .) }}{{ end -}}
{{- with (get $hard "limits.cpu" | default (get $hard "requests.cpu")) }}{{ $_ := set $quota "cpu" (toString .) }}{{ end -}}
{{- with (get $hard "limits.memory" | default (get $hard "requests.memory")) }}{{ $_ := set $quota "memory" (toString .) }}{{ end -}}
{{- $runtime := $config.opensandbox.runtime | default dict -}}
{{- $_ := set $runtime "resourceQuota" $quota -}}
{{- $_ := set $config.opensandbox "runtime" $runtime -}}
{{- end -}}
{{- include "sandboxd.prune" $config -}}
{{- end -}}
