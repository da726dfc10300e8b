package main

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsscheduler"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsschedulertargets"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/relaybatch/relay/internal/resources"
)

// Schedules is the EventBridge Scheduler side: the schedule group that
// holds the cron templates' schedules (created at run time by the api
// function), the role Scheduler assumes to invoke the scheduler function,
// the scheduler function itself, and the dispatcher's one-minute tick.
type Schedules struct {
	Scope constructs.Construct
	Group awsscheduler.ScheduleGroup
	// InvokeRole is passed by the api function to every template schedule.
	InvokeRole awsiam.Role
	Function   *function
	// SchedulerArn is the scheduler function's ARN, built from its name.
	SchedulerArn *string
	groupName    string
}

// tickMessage is what the dispatcher receives every minute: its periodic
// sweep (expiry, capacity leases).
const tickMessage = `{"type":"tick"}`

func NewSchedules(scope constructs.Construct, props RelayProps, storage *Storage, pipeline *Pipeline, env map[string]*string) *Schedules {
	c := constructs.NewConstruct(scope, jsii.String("Schedules"))
	set := props.Set()
	stack := awscdk.Stack_Of(c)

	group := awsscheduler.NewScheduleGroup(c, jsii.String("Group"), &awsscheduler.ScheduleGroupProps{
		ScheduleGroupName: jsii.String(set.ScheduleGroup),
		RemovalPolicy:     props.RemovalPolicy(),
	})
	stableID(group, "ScheduleGroup")

	fn := newFunction(c, props, set.Function("scheduler"), env)
	storage.GrantTable(fn.Role)
	storage.GrantBucket(fn.Role)
	// A firing of a template that cannot run ends it: its webhook too.
	pipeline.GrantSend(fn.Role, resources.Dispatch, resources.Webhook)
	// A one-time schedule (an expiry) is deleted by the run it fires.
	fn.Role.AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions:   jsii.Strings("scheduler:DeleteSchedule"),
		Resources: jsii.Strings(*groupSchedulesArn(stack, set.ScheduleGroup)),
	}))

	// Built from the name rather than the function's attribute, so that
	// every function, the scheduler included, can carry it in its
	// environment without a dependency cycle.
	schedulerArn := functionArn(stack, props.Prefix, "scheduler")
	invoke := awsiam.NewRole(c, jsii.String("InvokeRole"), &awsiam.RoleProps{
		Description: jsii.String("EventBridge Scheduler invokes the " + props.Prefix + " scheduler function for cron templates"),
		// Scheduler names the schedule group as the source: only schedules
		// of this group may use the role (confused deputy).
		AssumedBy: awsiam.NewServicePrincipal(jsii.String("scheduler.amazonaws.com"), &awsiam.ServicePrincipalOpts{
			Conditions: &map[string]any{
				"StringEquals": map[string]any{
					"aws:SourceAccount": stack.Account(),
					"aws:SourceArn":     group.ScheduleGroupArn(),
				},
			},
		}),
	})
	invoke.AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions:   jsii.Strings("lambda:InvokeFunction"),
		Resources: jsii.Strings(*schedulerArn),
	}))

	tick := awsscheduler.NewSchedule(c, jsii.String("Tick"), &awsscheduler.ScheduleProps{
		ScheduleName:  jsii.String(props.Prefix + "-tick"),
		Description:   jsii.String("the dispatcher's periodic sweep: expiry and capacity release"),
		ScheduleGroup: group,
		Schedule:      awsscheduler.ScheduleExpression_Rate(awscdk.Duration_Minutes(jsii.Number(1))),
		Target: awsschedulertargets.NewSqsSendMessage(pipeline.Queues[resources.Dispatch], &awsschedulertargets.SqsSendMessageProps{
			Input: awsscheduler.ScheduleTargetInput_FromText(jsii.String(tickMessage)),
			// A late tick is worthless: the next one comes a minute later.
			MaxEventAge:   awscdk.Duration_Minutes(jsii.Number(1)),
			RetryAttempts: jsii.Number(0),
		}),
	})
	// The schedule names its group by name, which CloudFormation does not
	// see as a dependency.
	tick.Node().AddDependency(group)

	return &Schedules{Scope: c, Group: group, InvokeRole: invoke, Function: fn, SchedulerArn: schedulerArn, groupName: set.ScheduleGroup}
}

// GrantManage lets role create, read and delete schedules in the group and
// pass the invoke role to them: what the api function does for templates.
func (s *Schedules) GrantManage(role awsiam.IRole) {
	stack := awscdk.Stack_Of(s.Scope)
	role.AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions:   jsii.Strings("scheduler:CreateSchedule", "scheduler:GetSchedule", "scheduler:DeleteSchedule"),
		Resources: jsii.Strings(*groupSchedulesArn(stack, s.groupName)),
	}))
	role.AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions:   jsii.Strings("iam:PassRole"),
		Resources: jsii.Strings(*s.InvokeRole.RoleArn()),
		Conditions: &map[string]any{
			"StringEquals": map[string]any{"iam:PassedToService": "scheduler.amazonaws.com"},
		},
	}))
}

// groupSchedulesArn matches every schedule of the group.
func groupSchedulesArn(stack awscdk.Stack, group string) *string {
	return stack.FormatArn(&awscdk.ArnComponents{
		Service:      jsii.String("scheduler"),
		Resource:     jsii.String("schedule"),
		ResourceName: jsii.String(group + "/*"),
		ArnFormat:    awscdk.ArnFormat_SLASH_RESOURCE_NAME,
	})
}
