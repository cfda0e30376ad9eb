package worker

import (
	"fmt"
	"net/url"
	"strings"
)

// The OpenTelemetry variables the worker reads itself. The exporter and the
// SDK read the others as the specification says (headers, timeout,
// compression, certificates, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES,
// OTEL_TRACES_SAMPLER, OTEL_BSP_*).
const (
	envEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	envTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	envProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	envTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	envTracesExporter = "OTEL_TRACES_EXPORTER"
	envSDKDisabled    = "OTEL_SDK_DISABLED"
)

// otelEnv is what the OTEL_* variables ask of the worker's tracing.
type otelEnv struct {
	export   bool   // export traces over OTLP/HTTP
	endpoint string // where to, for the logs (the traces endpoint wins, as in the exporter)
}

// readOTelEnv reads the tracing variables through getenv: export when an
// OTLP endpoint is set, unless OTEL_SDK_DISABLED=true or
// OTEL_TRACES_EXPORTER=none. A value the exporter would ignore or misuse
// (an endpoint that is no http(s) URL, the grpc protocol this worker does
// not speak) is a problem, refused at start rather than a silent default.
func readOTelEnv(getenv func(string) string) (otelEnv, []problem) {
	get := func(k string) string { return strings.TrimSpace(getenv(k)) }
	var env otelEnv
	var ps []problem
	for _, k := range []string{envEndpoint, envTracesEndpoint} {
		v := get(k)
		if v == "" {
			continue
		}
		if p := checkEndpoint(k, v); p != nil {
			ps = append(ps, *p)
			continue
		}
		u, _ := url.Parse(v)
		env.export, env.endpoint = true, u.Redacted()
	}
	if !env.export && len(ps) == 0 || strings.EqualFold(get(envSDKDisabled), "true") {
		return otelEnv{}, nil
	}
	switch e := get(envTracesExporter); e {
	case "", "otlp":
	case "none":
		return otelEnv{}, nil
	default:
		ps = append(ps, problem{Var: envTracesExporter, Message: fmt.Sprintf("expected otlp or none (this worker exports traces over OTLP only), got %q", e)})
	}
	for _, k := range []string{envProtocol, envTracesProtocol} {
		if p := checkProtocol(k, get(k)); p != nil {
			ps = append(ps, *p)
		}
	}
	if len(ps) > 0 {
		return otelEnv{}, ps
	}
	return env, nil
}

// checkEndpoint reports an OTLP/HTTP endpoint that is not an http:// or
// https:// URL with a host: the exporter would log it and send the spans
// to localhost instead.
func checkEndpoint(name, v string) *problem {
	const want = "an http:// or https:// URL of the collector's OTLP/HTTP receiver, such as http://otel-collector:4318"
	u, err := url.Parse(v)
	if err != nil {
		return &problem{Var: name, Message: "cannot be parsed; expected " + want}
	}
	if s := strings.ToLower(u.Scheme); s != "http" && s != "https" || u.Host == "" {
		return &problem{Var: name, Message: fmt.Sprintf("expected %s, got %q", want, u.Redacted())}
	}
	return nil
}

// checkProtocol reports a protocol the worker's OTLP/HTTP exporter does not
// speak: it would send http/protobuf to a gRPC receiver.
func checkProtocol(name, v string) *problem {
	switch v {
	case "", "http/protobuf", "http/json":
		return nil
	case "grpc":
		return &problem{Var: name, Message: "grpc is not built into this worker; expected http/protobuf or http/json, with the endpoint on the collector's OTLP/HTTP port (4318)"}
	}
	return &problem{Var: name, Message: fmt.Sprintf("expected http/protobuf or http/json, got %q", v)}
}
