package main

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// NewRelayStack is the whole deployment, one stack named after the prefix:
// storage, secrets, pipeline, schedules, api, observability.
func NewRelayStack(scope constructs.Construct, props RelayProps) awscdk.Stack {
	stack := awscdk.NewStack(scope, jsii.String(props.Prefix), &awscdk.StackProps{
		Description: jsii.String("Relay Batch (" + props.Prefix + "): OpenAI/Anthropic-compatible batch API"),
		// Synthesize without an account or region: the template is the same
		// for every environment, and synth needs no credentials.
	})
	set := props.Set()

	storage := NewStorage(stack, props)
	secrets := NewSecrets(stack, props)

	// Every function gets the same environment (config.FromEnv reads it).
	// The scheduler's role and ARN are added once they exist.
	env := map[string]*string{
		"RELAY_PREFIX":                 jsii.String(props.Prefix),
		"RELAY_TABLE":                  storage.Table.TableName(),
		"RELAY_BUCKET":                 storage.Bucket.BucketName(),
		"RELAY_CONFIG":                 jsii.String(taskRoot + "/" + modelsFile),
		"RELAY_SCHEDULE_GROUP":         jsii.String(set.ScheduleGroup),
		"RELAY_SECRET_PREFIX":          jsii.String(props.SecretPrefix()),
		"RELAY_ALLOW_PRIVATE_WEBHOOKS": jsii.String("false"),
	}
	for k, v := range props.auditLock() {
		env[k] = jsii.String(v)
	}
	pipeline := NewPipeline(stack, props, storage, secrets, env)
	schedules := NewSchedules(stack, props, storage, pipeline, env)
	api := NewAPI(stack, props, storage, pipeline, schedules, env)

	fns := append([]*function{api.Function}, pipeline.Functions...)
	fns = append(fns, schedules.Function)
	for _, f := range fns {
		f.Fn.AddEnvironment(jsii.String("RELAY_SCHEDULER_ROLE_ARN"), schedules.InvokeRole.RoleArn(), nil)
		f.Fn.AddEnvironment(jsii.String("RELAY_SCHEDULER_FUNCTION_ARN"), schedules.SchedulerArn, nil)
	}
	NewObservability(stack, props, pipeline, api, fns)

	awscdk.NewCfnOutput(stack, jsii.String("TableName"), &awscdk.CfnOutputProps{Value: storage.Table.TableName()})
	awscdk.NewCfnOutput(stack, jsii.String("BucketName"), &awscdk.CfnOutputProps{Value: storage.Bucket.BucketName()})
	awscdk.NewCfnOutput(stack, jsii.String("SecretPrefix"), &awscdk.CfnOutputProps{
		Description: jsii.String("put each provider key in the secret named this prefix + the model's api_key_env"),
		Value:       jsii.String(props.SecretPrefix()),
	})
	return stack
}
