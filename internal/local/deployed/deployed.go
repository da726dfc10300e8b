// Package deployed reads back a stack that CloudFormation created (make
// deploy-emulator puts one on the emulator): its outputs, the environment
// its functions were given and their event-source mappings. The local
// runtime then runs the functions' code against those resources
// (localrun.Options.Existing) instead of creating its own, so the code and
// the template must agree on every name and variable.
package deployed

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudformation"
	"github.com/aws/aws-sdk-go-v2/service/lambda"

	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/resources"
)

// Stack is a deployed stack as CloudFormation and Lambda report it.
type Stack struct {
	Name    string
	Status  string
	Outputs map[string]string
	// Functions by deployed name (<prefix>-<name>).
	Functions map[string]Function
}

// Function is one deployed Lambda function.
type Function struct {
	Name     string
	Env      map[string]string
	Timeout  time.Duration
	Memory   int
	Mappings []Mapping
}

// Mapping is an event-source mapping feeding a function.
type Mapping struct {
	SourceARN      string
	BatchSize      int
	MaxConcurrency int
	// ReportBatchItemFailures: the function answers with the failed
	// messages only (events.SQSEventResponse), the rest are deleted.
	ReportBatchItemFailures bool
}

// Read describes the stack name on the endpoint of cfg.
func Read(ctx context.Context, cfg aws.Config, name string) (*Stack, error) {
	cf := cloudformation.NewFromConfig(cfg)
	out, err := cf.DescribeStacks(ctx, &cloudformation.DescribeStacksInput{StackName: &name})
	if err != nil {
		return nil, fmt.Errorf("describe stack %s: %w", name, err)
	}
	if len(out.Stacks) != 1 {
		return nil, fmt.Errorf("describe stack %s: %d stacks", name, len(out.Stacks))
	}
	st := &Stack{Name: name, Status: string(out.Stacks[0].StackStatus), Outputs: map[string]string{}, Functions: map[string]Function{}}
	for _, o := range out.Stacks[0].Outputs {
		st.Outputs[aws.ToString(o.OutputKey)] = aws.ToString(o.OutputValue)
	}
	lc := lambda.NewFromConfig(cfg)
	p := cloudformation.NewListStackResourcesPaginator(cf, &cloudformation.ListStackResourcesInput{StackName: &name})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("list resources of %s: %w", name, err)
		}
		for _, r := range page.StackResourceSummaries {
			if aws.ToString(r.ResourceType) != "AWS::Lambda::Function" {
				continue
			}
			f, err := readFunction(ctx, lc, aws.ToString(r.PhysicalResourceId))
			if err != nil {
				return nil, err
			}
			st.Functions[f.Name] = f
		}
	}
	return st, nil
}

func readFunction(ctx context.Context, lc *lambda.Client, name string) (Function, error) {
	c, err := lc.GetFunctionConfiguration(ctx, &lambda.GetFunctionConfigurationInput{FunctionName: &name})
	if err != nil {
		return Function{}, fmt.Errorf("get function %s: %w", name, err)
	}
	f := Function{
		Name:    aws.ToString(c.FunctionName),
		Timeout: time.Duration(aws.ToInt32(c.Timeout)) * time.Second,
		Memory:  int(aws.ToInt32(c.MemorySize)),
		Env:     map[string]string{},
	}
	if c.Environment != nil {
		maps.Copy(f.Env, c.Environment.Variables)
	}
	ms, err := lc.ListEventSourceMappings(ctx, &lambda.ListEventSourceMappingsInput{FunctionName: &name})
	if err != nil {
		return Function{}, fmt.Errorf("list event source mappings of %s: %w", name, err)
	}
	for _, m := range ms.EventSourceMappings {
		mm := Mapping{SourceARN: aws.ToString(m.EventSourceArn), BatchSize: int(aws.ToInt32(m.BatchSize))}
		if m.ScalingConfig != nil {
			mm.MaxConcurrency = int(aws.ToInt32(m.ScalingConfig.MaximumConcurrency))
		}
		for _, t := range m.FunctionResponseTypes {
			mm.ReportBatchItemFailures = mm.ReportBatchItemFailures || t == "ReportBatchItemFailures"
		}
		f.Mappings = append(f.Mappings, mm)
	}
	return f, nil
}

// Env is the configuration every function of the stack was given, parsed as
// a function parses it (config.FromEnv); they must all have the same.
func (s *Stack) Env() (config.Env, error) {
	var first *Function
	for _, f := range s.Functions {
		if first == nil {
			first = &f
			continue
		}
		if !maps.Equal(f.Env, first.Env) {
			return config.Env{}, fmt.Errorf("functions %s and %s have different environments", first.Name, f.Name)
		}
	}
	if first == nil {
		return config.Env{}, fmt.Errorf("stack %s has no functions", s.Name)
	}
	return config.FromVars(func(k string) string { return first.Env[k] })
}

// Apply puts the deployed timeouts, memory sizes, source queues and batch
// sizes into the functions of set, which the local runtime's pollers take
// as Lambda's. Every function of set must be deployed, as <prefix>-<name>.
func (s *Stack) Apply(set *resources.Set) error {
	for i, def := range set.Functions {
		f, ok := s.Functions[set.Prefix+"-"+def.Name]
		if !ok {
			return fmt.Errorf("function %s-%s is not in stack %s", set.Prefix, def.Name, s.Name)
		}
		def.Timeout, def.Memory = f.Timeout, f.Memory
		def.Queue, def.BatchSize, def.MaxConcurrency = "", 0, 0
		switch len(f.Mappings) {
		case 0:
		case 1:
			m := f.Mappings[0]
			def.Queue = m.SourceARN[strings.LastIndex(m.SourceARN, ":")+1:]
			def.BatchSize, def.MaxConcurrency = m.BatchSize, m.MaxConcurrency
		default:
			return fmt.Errorf("function %s has %d event source mappings, the local runtime feeds one", f.Name, len(f.Mappings))
		}
		set.Functions[i] = def
	}
	return nil
}

// Assets maps each function of the templates in the cloud assembly dir
// (cdk.out) to its bundle's directory there: the bootstrap and models file
// CDK uploads as the function's code.
func Assets(dir string) (map[string]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.template.json"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no template in %s: run make synth", dir)
	}
	out := map[string]string{}
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		var tpl struct {
			Resources map[string]struct {
				Type       string `json:"Type"`
				Properties struct {
					FunctionName any `json:"FunctionName"`
				} `json:"Properties"`
				Metadata map[string]any `json:"Metadata"`
			} `json:"Resources"`
		}
		if err := json.Unmarshal(b, &tpl); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		for _, r := range tpl.Resources {
			name, _ := r.Properties.FunctionName.(string)
			path, _ := r.Metadata["aws:asset:path"].(string)
			if r.Type == "AWS::Lambda::Function" && name != "" && path != "" {
				out[name] = filepath.Join(dir, path)
			}
		}
	}
	return out, nil
}
