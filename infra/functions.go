package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/relaybatch/relay/internal/resources"
)

// modelsFile is where the models file sits in every function bundle;
// RELAY_CONFIG points there.
const (
	modelsFile = "relay.yaml"
	taskRoot   = "/var/task" // where Lambda unpacks a bundle
)

// stageBundles lays out dir/<function>/ with the function's bootstrap from
// buildDir and the models file, for every function of fns.
func stageBundles(dir, buildDir, modelsPath string, fns []resources.Function) error {
	for _, f := range fns {
		bin := filepath.Join(buildDir, f.Name, "bootstrap")
		if _, err := os.Stat(bin); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("%s is missing: run `make build` first", bin)
			}
			return err
		}
		dst := filepath.Join(dir, f.Name)
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return err
		}
		if err := copyFile(bin, filepath.Join(dst, "bootstrap"), 0o755); err != nil {
			return err
		}
		if err := copyFile(modelsPath, filepath.Join(dst, modelsFile), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(src, dst string, mode fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("stage %s: %w", src, err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, mode)
	if err != nil {
		return fmt.Errorf("stage %s: %w", src, err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("stage %s: %w", src, err)
	}
	// Umask may have narrowed the mode; Lambda needs bootstrap executable.
	if err := out.Chmod(mode); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// function is one deployed Lambda function with the role it runs as.
type function struct {
	Def  resources.Function
	Fn   awslambda.Function
	Role awsiam.Role
	Logs awslogs.LogGroup
}

// newFunction creates the function def names, running as a role of its own
// that may only write its own log group; every other permission is granted
// by the component that owns the resource.
func newFunction(scope constructs.Construct, props RelayProps, def resources.Function, env map[string]*string) *function {
	c := constructs.NewConstruct(scope, jsii.String(titleCase(def.Name)))
	logs := awslogs.NewLogGroup(c, jsii.String("Logs"), &awslogs.LogGroupProps{
		Retention:     awslogs.RetentionDays_ONE_MONTH,
		RemovalPolicy: props.RemovalPolicy(),
	})
	role := awsiam.NewRole(c, jsii.String("Role"), &awsiam.RoleProps{
		AssumedBy:   awsiam.NewServicePrincipal(jsii.String("lambda.amazonaws.com"), nil),
		Description: jsii.String(fmt.Sprintf("%s %s function", props.Prefix, def.Name)),
	})
	logs.GrantWrite(role)
	var tmp awscdk.Size
	if def.TmpSize > 0 {
		tmp = awscdk.Size_Mebibytes(jsii.Number(float64(def.TmpSize)))
	}
	var reserved *float64
	if def.Reserved > 0 && props.ReserveConcurrency {
		reserved = jsii.Number(float64(def.Reserved))
	}
	fn := awslambda.NewFunction(c, jsii.String("Function"), &awslambda.FunctionProps{
		FunctionName:         jsii.String(functionName(props.Prefix, def.Name)),
		Runtime:              awslambda.Runtime_PROVIDED_AL2023(),
		Architecture:         props.Arch,
		Handler:              jsii.String("bootstrap"),
		Code:                 awslambda.Code_FromAsset(jsii.String(filepath.Join(props.BundleDir, def.Name)), nil),
		Timeout:              awscdk.Duration_Seconds(jsii.Number(def.Timeout.Seconds())),
		MemorySize:           jsii.Number(float64(def.Memory)),
		EphemeralStorageSize: tmp,
		// docs/architecture.md "Concurrency" (resources.Define).
		ReservedConcurrentExecutions: reserved,
		Role:                         role,
		LogGroup:                     logs,
		LoggingFormat:                awslambda.LoggingFormat_JSON,
		ApplicationLogLevelV2:        awslambda.ApplicationLogLevel_INFO,
		SystemLogLevelV2:             awslambda.SystemLogLevel_WARN,
		Environment:                  &env,
	})
	return &function{Def: def, Fn: fn, Role: role, Logs: logs}
}

// functionName is the deployed name of a function; other resources refer to
// functions by this name to avoid dependency cycles.
func functionName(prefix, name string) string { return prefix + "-" + name }

// functionArn is the ARN of the function named name in this stack's account
// and region, built from its name.
func functionArn(stack awscdk.Stack, prefix, name string) *string {
	return stack.FormatArn(&awscdk.ArnComponents{
		Service:      jsii.String("lambda"),
		Resource:     jsii.String("function"),
		ResourceName: jsii.String(functionName(prefix, name)),
		ArnFormat:    awscdk.ArnFormat_COLON_RESOURCE_NAME,
	})
}

func titleCase(s string) string {
	if s == "" {
		return s
	}
	return string(s[0]-'a'+'A') + s[1:]
}
