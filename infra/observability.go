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

	"github.com/relaybatch/relay/internal/metrics"
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
	if props.Models != nil {
		for _, m := range props.Models.Models {
			modelAlarms(c, o, props, m.Name)
		}
	}
	newDashboard(c, props, pipeline, fns)
	return o
}

// Thresholds of the per-model alarms.
const (
	// A model fails this share of its rows (in percent) in a period, and
	// at least failedRowsFloor rows, to alarm.
	modelErrorPercent = 50
	failedRowsFloor   = 10
	// Capacity in use all the time for this many 5-minute periods alarms.
	pinnedPeriods = 6
)

// modelMetric is one of a model's metrics (internal/metrics).
func modelMetric(props RelayProps, model, name, stat string) awscloudwatch.Metric {
	dims := map[string]*string{resources.MetricDimension: jsii.String(props.Prefix), metrics.Model: jsii.String(model)}
	if name == metrics.ChunkDuration {
		dims[metrics.Function] = jsii.String("executor") // the function that runs chunks
	}
	return awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
		Namespace:     jsii.String(resources.MetricNamespace),
		MetricName:    jsii.String(name),
		DimensionsMap: &dims,
		Period:        awscdk.Duration_Minutes(jsii.Number(5)),
		Statistic:     jsii.String(stat),
		Label:         jsii.String(model),
	})
}

// modelAlarms are a model's alarms on the functions' metrics: most of its
// rows failing, its capacity in use all the time (batches queue), a
// circuit of one of its keys opened, a key dropped from its pool.
func modelAlarms(c constructs.Construct, o *Observability, props RelayProps, model string) {
	id := resources.LogicalName(model)
	add := func(kind, description string, metric awscloudwatch.IMetric, threshold float64, periods int) {
		a := awscloudwatch.NewAlarm(c, jsii.String(kind+id), &awscloudwatch.AlarmProps{
			AlarmName:          jsii.String(props.Prefix + "-" + kind + "-" + model),
			AlarmDescription:   jsii.String(description + ". Runbook: " + RunbookURL(kind)),
			Metric:             metric,
			Threshold:          jsii.Number(threshold),
			EvaluationPeriods:  jsii.Number(float64(periods)),
			ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
			TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
		})
		a.AddAlarmAction(awscloudwatchactions.NewSnsAction(o.Topic))
		o.Alarms = append(o.Alarms, a)
	}
	add("ModelErrorRate", fmt.Sprintf("over %d%% of %s's rows failed in 5 minutes", modelErrorPercent, model),
		awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
			Expression: jsii.String(fmt.Sprintf("IF(f >= %d, 100*f/(c+f), 0)", failedRowsFloor)),
			UsingMetrics: &map[string]awscloudwatch.IMetric{
				"f": modelMetric(props, model, metrics.RowsFailed, "Sum"),
				"c": modelMetric(props, model, metrics.RowsCompleted, "Sum"),
			},
			Period: awscdk.Duration_Minutes(jsii.Number(5)),
		}), modelErrorPercent, 1)
	add("ModelCapacityPinned", fmt.Sprintf("all of %s's max_concurrency has been in use for %d minutes", model, pinnedPeriods*5),
		awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
			Expression: jsii.String("IF(k > 0, 100*i/k, 0)"),
			UsingMetrics: &map[string]awscloudwatch.IMetric{
				"i": modelMetric(props, model, metrics.InFlight, "Minimum"),
				"k": modelMetric(props, model, metrics.Capacity, "Maximum"),
			},
			Period: awscdk.Duration_Minutes(jsii.Number(5)),
		}), 100, pinnedPeriods)
	add("UpstreamCircuitOpen", fmt.Sprintf("a circuit of %s's upstream opened in an executor: its requests failed in a row", model),
		modelMetric(props, model, metrics.CircuitsOpened, "Sum"), 1, 1)
	add("UpstreamKeyDropped", fmt.Sprintf("a key of %s's pool answered 401/403 and was dropped", model),
		modelMetric(props, model, metrics.KeysDropped, "Sum"), 1, 1)
}

// newDashboard is the deployment's CloudWatch dashboard: per model the
// rows, upstream answers, latency, capacity and chunk durations the functions publish
// (internal/metrics), and the pipeline's queues and functions.
func newDashboard(c constructs.Construct, props RelayProps, pipeline *Pipeline, fns []*function) {
	var models []string
	if props.Models != nil {
		models = props.Models.Names()
	}
	perModel := func(title, stat string, names ...string) awscloudwatch.IWidget {
		var ms []awscloudwatch.IMetric
		for _, m := range models {
			for _, n := range names {
				mm := modelMetric(props, m, n, stat)
				if len(names) > 1 {
					mm = mm.With(&awscloudwatch.MetricOptions{Label: jsii.String(m + " " + n)})
				}
				ms = append(ms, mm)
			}
		}
		return awscloudwatch.NewGraphWidget(&awscloudwatch.GraphWidgetProps{Title: jsii.String(title), Left: &ms, Width: jsii.Number(12)})
	}
	var queues, fnErrors []awscloudwatch.IMetric
	max := &awscloudwatch.MetricOptions{Statistic: jsii.String("Maximum")}
	for _, key := range []string{resources.Dispatch, resources.Work, resources.Finalize, resources.Webhook} {
		queues = append(queues, pipeline.Queues[key].MetricApproximateAgeOfOldestMessage(max))
	}
	for _, f := range fns {
		fnErrors = append(fnErrors, f.Fn.MetricErrors(&awscloudwatch.MetricOptions{Label: jsii.String(f.Def.Name)}))
	}
	widgets := []awscloudwatch.IWidget{
		perModel("Rows completed", "Sum", metrics.RowsCompleted),
		perModel("Rows failed", "Sum", metrics.RowsFailed),
		perModel("Upstream latency p50 (ms)", "p50", metrics.UpstreamLatency),
		perModel("Upstream latency p99 (ms)", "p99", metrics.UpstreamLatency),
		perModel("Upstream 429, 5xx, 4xx, no answer", "Sum", metrics.Upstream429, metrics.Upstream5xx, metrics.Upstream4xx, metrics.NoAnswer),
		perModel("Fallbacks and tokens", "Sum", metrics.Fallbacks, metrics.Tokens),
		perModel("In flight and capacity", "Maximum", metrics.InFlight, metrics.Capacity),
		perModel("Chunk duration in the executor p50 (ms)", "p50", metrics.ChunkDuration),
		perModel("Chunk duration in the executor p99 (ms)", "p99", metrics.ChunkDuration),
		perModel("Circuits opened, keys dropped", "Sum", metrics.CircuitsOpened, metrics.KeysDropped),
		awscloudwatch.NewGraphWidget(&awscloudwatch.GraphWidgetProps{Title: jsii.String("Queue age (s)"), Left: &queues, Width: jsii.Number(12)}),
		awscloudwatch.NewGraphWidget(&awscloudwatch.GraphWidgetProps{Title: jsii.String("Function errors"), Left: &fnErrors, Width: jsii.Number(12)}),
	}
	awscloudwatch.NewDashboard(c, jsii.String("Dashboard"), &awscloudwatch.DashboardProps{
		DashboardName: jsii.String(props.Prefix),
		Widgets:       &[]*[]awscloudwatch.IWidget{&widgets},
	})
}
