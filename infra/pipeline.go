package main

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambdaeventsources"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/relaybatch/relay/internal/resources"
)

// Pipeline is the queues, each with its DLQ, and the functions that drain
// them: dispatcher, executor, deadletter, finalizer, webhook.
type Pipeline struct {
	Scope constructs.Construct
	// Queues and DLQs by queue key (resources.Dispatch, …).
	Queues    map[string]awssqs.Queue
	DLQs      map[string]awssqs.Queue
	Functions []*function
}

// pipelineFunctions are the functions fed by a queue, in deployment order.
var pipelineFunctions = []string{"dispatcher", "executor", "deadletter", "finalizer", "webhook"}

func NewPipeline(scope constructs.Construct, props RelayProps, storage *Storage, secrets *Secrets, env map[string]*string) *Pipeline {
	c := constructs.NewConstruct(scope, jsii.String("Pipeline"))
	set := props.Set()
	p := &Pipeline{Scope: c, Queues: map[string]awssqs.Queue{}, DLQs: map[string]awssqs.Queue{}}

	byName := map[string]awssqs.Queue{}
	for _, key := range []string{resources.Dispatch, resources.Work, resources.Finalize, resources.Webhook} {
		def := set.Queue(key)
		id := titleCase(key)
		dlq := newQueue(c, id+"DLQ", def.DLQ(), nil)
		q := newQueue(c, id+"Queue", def, &awssqs.DeadLetterQueue{
			Queue:           dlq,
			MaxReceiveCount: jsii.Number(float64(def.MaxReceiveCount)),
		})
		p.Queues[key], p.DLQs[key] = q, dlq
		byName[def.Name], byName[def.DLQName] = q, dlq
	}

	for _, name := range pipelineFunctions {
		def := set.Function(name)
		f := newFunction(c, props, def, env)
		storage.GrantTable(f.Role)
		if name != "webhook" {
			storage.GrantBucket(f.Role)
		}
		p.GrantSend(f.Role, pipelineSends[name]...)
		if def.Queue != "" {
			src := &awslambdaeventsources.SqsEventSourceProps{
				BatchSize:               jsii.Number(float64(def.BatchSize)),
				ReportBatchItemFailures: jsii.Bool(true),
			}
			if def.MaxConcurrency > 0 {
				src.MaxConcurrency = jsii.Number(float64(def.MaxConcurrency))
			}
			f.Fn.AddEventSource(awslambdaeventsources.NewSqsEventSource(byName[def.Queue], src))
		}
		p.Functions = append(p.Functions, f)
	}
	// The executor reads the provider keys; nothing else does. The webhook
	// function reads the operator endpoints' secrets, which sign their
	// deliveries.
	secrets.GrantRead(p.Function("executor").Role)
	secrets.GrantOperatorRead(p.Function("webhook").Role)
	// It alone calls the models, so it alone may invoke Bedrock's.
	GrantBedrock(p.Function("executor").Role, props.Models)
	return p
}

// pipelineSends is which queues each pipeline function sends to ("work-dlq"
// is the work queue's DLQ). The executor extends its own message's
// visibility (heartbeat) through the work queue's event source grant,
// which includes ChangeMessageVisibility.
var pipelineSends = map[string][]string{
	// A batch that fails validation ends in the dispatcher: its webhook too.
	// Its tick sends chunks out of attempts to the work DLQ.
	"dispatcher": {resources.Work, workDLQ, resources.Dispatch, resources.Finalize, resources.Webhook},
	// A commit claims the next chunk and sends its work message.
	"executor": {resources.Work, resources.Finalize},
	// A chunk that reached the DLQ with attempts left goes back to work.
	"deadletter": {resources.Work, resources.Finalize},
	"finalizer":  {resources.Webhook},
	"webhook":    {resources.Webhook}, // retries re-enqueue with a delay
}

func newQueue(scope constructs.Construct, id string, def resources.Queue, dlq *awssqs.DeadLetterQueue) awssqs.Queue {
	q := awssqs.NewQueue(scope, jsii.String(id), &awssqs.QueueProps{
		QueueName:         jsii.String(def.Name),
		VisibilityTimeout: awscdk.Duration_Seconds(jsii.Number(def.VisibilityTimeout.Seconds())),
		RetentionPeriod:   awscdk.Duration_Seconds(jsii.Number(def.Retention.Seconds())),
		DeadLetterQueue:   dlq,
		Encryption:        awssqs.QueueEncryption_SQS_MANAGED,
		EnforceSSL:        jsii.Bool(true),
	})
	stableID(q, id)
	return q
}

// GrantSend lets role send to the queues with the given keys; queue URLs
// are resolved by name, which SendMessage's grant includes (GetQueueUrl).
func (p *Pipeline) GrantSend(role awsiam.IRole, keys ...string) {
	for _, k := range keys {
		if k == workDLQ {
			p.DLQs[resources.Work].GrantSendMessages(role)
			continue
		}
		p.Queues[k].GrantSendMessages(role)
	}
}

const workDLQ = resources.Work + "-dlq"

// Function returns the pipeline function called name.
func (p *Pipeline) Function(name string) *function {
	for _, f := range p.Functions {
		if f.Def.Name == name {
			return f
		}
	}
	panic("infra: no pipeline function " + name)
}
