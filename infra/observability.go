package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatchactions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssnssubscriptions"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/relaybatch/relay/internal/resources"
)

// RunbookURL is where docs/runbook.md's entry with heading entry is, as
// GitHub anchors a heading (lower case).
func RunbookURL(entry string) string {
	return "docs/runbook.md#" + strings.ToLower(entry)
}

// Observability is the alarms and the topic they notify. The logs are the
// functions' own JSON log groups (newFunction) and the API's access log.
type Observability struct {
	Scope  constructs.Construct
	Topic  awssns.Topic
	Alarms []awscloudwatch.Alarm
}

// Alarm thresholds.
const (
	// oldestBatchAge is close to the longest completion window (24h): a
	// batch this old is about to expire unfinished.
	oldestBatchAge = 20 * time.Hour
	// A chunk waiting this long for an executor means the pipeline stalls.
	workQueueAge     = time.Hour
	dispatchQueueAge = 15 * time.Minute
	api5xxPerPeriod  = 5
)

func NewObservability(scope constructs.Construct, props RelayProps, pipeline *Pipeline, api *API, fns []*function) *Observability {
	c := constructs.NewConstruct(scope, jsii.String("Observability"))
	topic := awssns.NewTopic(c, jsii.String("Alarms"), &awssns.TopicProps{
		DisplayName: jsii.String(props.Prefix + " alarms"),
		EnforceSSL:  jsii.Bool(true),
	})
	if props.AlarmEmail != "" {
		topic.AddSubscription(awssnssubscriptions.NewEmailSubscription(jsii.String(props.AlarmEmail), nil))
	}
	o := &Observability{Scope: c, Topic: topic}
	period := awscdk.Duration_Minutes(jsii.Number(5))

	// Each alarm names its runbook entry: the heading of its id, or
	// "Throttles", which one entry serves for every function.
	alarm := func(id, description string, metric awscloudwatch.IMetric, threshold float64) {
		entry := id
		if strings.HasSuffix(id, "Throttles") {
			entry = "Throttles"
		}
		a := awscloudwatch.NewAlarm(c, jsii.String(id), &awscloudwatch.AlarmProps{
			AlarmName:          jsii.String(props.Prefix + "-" + id),
			AlarmDescription:   jsii.String(description + ". Runbook: " + RunbookURL(entry)),
			Metric:             metric,
			Threshold:          jsii.Number(threshold),
			EvaluationPeriods:  jsii.Number(1),
			ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
			TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
		})
		a.AddAlarmAction(awscloudwatchactions.NewSnsAction(topic))
		o.Alarms = append(o.Alarms, a)
	}
	max := &awscloudwatch.MetricOptions{Period: period, Statistic: jsii.String("Maximum")}
	sum := &awscloudwatch.MetricOptions{Period: period, Statistic: jsii.String("Sum")}

	for _, key := range []string{resources.Dispatch, resources.Work, resources.Finalize, resources.Webhook} {
		alarm(titleCase(key)+"DLQDepth",
			fmt.Sprintf("messages in the %s DLQ: a %s message failed every retry", key, key),
			pipeline.DLQs[key].MetricApproximateNumberOfMessagesVisible(max), 1)
	}
	for _, f := range fns {
		name := titleCase(f.Def.Name)
		alarm(name+"Errors", "the "+f.Def.Name+" function failed invocations", f.Fn.MetricErrors(sum), 1)
		alarm(name+"Throttles", "the "+f.Def.Name+" function was throttled", f.Fn.MetricThrottles(sum), 1)
	}
	alarm("WorkQueueAge", "a chunk has waited over an hour for an executor",
		pipeline.Queues[resources.Work].MetricApproximateAgeOfOldestMessage(max), workQueueAge.Seconds())
	alarm("DispatchQueueAge", "the dispatcher is falling behind",
		pipeline.Queues[resources.Dispatch].MetricApproximateAgeOfOldestMessage(max), dispatchQueueAge.Seconds())
	alarm("OldestBatchAge", "a batch is close to expiring unfinished",
		awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
			Namespace:     jsii.String(resources.MetricNamespace),
			MetricName:    jsii.String(resources.MetricOldestBatchAge),
			DimensionsMap: &map[string]*string{resources.MetricDimension: jsii.String(props.Prefix)},
			Period:        period,
			Statistic:     jsii.String("Maximum"),
		}), oldestBatchAge.Seconds())
	alarm("Api5xx", "the API answered with server errors",
		api.RestAPI.MetricServerError(sum), api5xxPerPeriod)
	return o
}
