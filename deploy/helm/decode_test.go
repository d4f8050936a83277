package chart_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// objects are the rendered objects of one release, decoded into their API types.
type objects struct {
	Deployments     []*appsv1.Deployment
	PDBs            []*policyv1.PodDisruptionBudget
	Services        []*corev1.Service
	ServiceAccounts []*corev1.ServiceAccount
	ConfigMaps      []*corev1.ConfigMap
	Jobs            []*batchv1.Job
	ServiceMonitors []*monitoringv1.ServiceMonitor
	PrometheusRules []*monitoringv1.PrometheusRule
}

// kinds maps every group/version/kind the chart may render to where its decoded objects go.
// Anything else (a wrong apiVersion too) is an error.
var kinds = map[schema.GroupVersionKind]func(*objects, []byte) error{
	appsv1.SchemeGroupVersion.WithKind("Deployment"): func(o *objects, b []byte) error {
		return decodeInto(b, &o.Deployments)
	},
	policyv1.SchemeGroupVersion.WithKind("PodDisruptionBudget"): func(o *objects, b []byte) error {
		return decodeInto(b, &o.PDBs)
	},
	corev1.SchemeGroupVersion.WithKind("Service"): func(o *objects, b []byte) error {
		return decodeInto(b, &o.Services)
	},
	corev1.SchemeGroupVersion.WithKind("ServiceAccount"): func(o *objects, b []byte) error {
		return decodeInto(b, &o.ServiceAccounts)
	},
	corev1.SchemeGroupVersion.WithKind("ConfigMap"): func(o *objects, b []byte) error {
		return decodeInto(b, &o.ConfigMaps)
	},
	batchv1.SchemeGroupVersion.WithKind("Job"): func(o *objects, b []byte) error {
		return decodeInto(b, &o.Jobs)
	},
	monitoringv1.SchemeGroupVersion.WithKind(monitoringv1.ServiceMonitorsKind): func(o *objects, b []byte) error {
		return decodeInto(b, &o.ServiceMonitors)
	},
	monitoringv1.SchemeGroupVersion.WithKind(monitoringv1.PrometheusRuleKind): func(o *objects, b []byte) error {
		return decodeInto(b, &o.PrometheusRules)
	},
}

// decodeInto decodes one document strictly and appends it: a duplicate key, an unknown field, or
// a field spelt in another case fails, as in the API server. (yaml.UnmarshalStrict alone is not
// enough: encoding/json matches field names case-insensitively, so readOnlyRootFileSystem would
// pass as readOnlyRootFilesystem there, and be dropped by the server.)
func decodeInto[T any](doc []byte, list *[]*T) error {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	obj := new(T)
	strict, err := sigsjson.UnmarshalStrict(j, obj, sigsjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	if err := errors.Join(strict...); err != nil {
		return err
	}
	*list = append(*list, obj)
	return nil
}

// decodeAll splits helm template's output into documents and decodes each strictly into its API
// type. It also checks every object's name and labels against Kubernetes' syntax rules.
func decodeAll(out []byte) (*objects, error) {
	o := &objects{}
	r := k8syaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(out)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return o, nil
		}
		if err != nil {
			return nil, err
		}
		var head struct {
			metav1.TypeMeta `json:",inline"`
			Metadata        struct {
				Name   string            `json:"name"`
				Labels map[string]string `json:"labels"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(doc, &head); err != nil {
			return nil, fmt.Errorf("%s: %w", source(doc), err)
		}
		if head.Kind == "" && head.APIVersion == "" {
			if isEmpty(doc) {
				continue // a template that rendered only comments
			}
			return nil, fmt.Errorf("%s: no apiVersion or kind", source(doc))
		}
		gvk := schema.FromAPIVersionAndKind(head.APIVersion, head.Kind)
		decode, ok := kinds[gvk]
		if !ok {
			return nil, fmt.Errorf("%s: unexpected %v", source(doc), gvk)
		}
		if err := decode(o, doc); err != nil {
			return nil, fmt.Errorf("%s: %s %s: %w", source(doc), head.Kind, head.Metadata.Name, err)
		}
		if errs := validation.IsDNS1123Label(head.Metadata.Name); len(errs) > 0 {
			return nil, fmt.Errorf("%s: name %q: %s", source(doc), head.Metadata.Name, strings.Join(errs, "; "))
		}
		for k, v := range head.Metadata.Labels {
			errs := append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...)
			if len(errs) > 0 {
				return nil, fmt.Errorf("%s: label %s=%q: %s", source(doc), k, v, strings.Join(errs, "; "))
			}
		}
	}
}

// source is the "# Source: walbox/templates/x.yaml" line helm writes above each document.
func source(doc []byte) string {
	for _, line := range strings.Split(string(doc), "\n") {
		if s, ok := strings.CutPrefix(line, "# Source: "); ok {
			return s
		}
	}
	return "(no source)"
}

func isEmpty(doc []byte) bool {
	for _, line := range strings.Split(string(doc), "\n") {
		if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
			return false
		}
	}
	return true
}
