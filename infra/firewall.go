package main

import (
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigateway"
	"github.com/aws/aws-cdk-go/awscdk/v2/awswafv2"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// WAF's bounds on a rate-based rule's limit (requests per window).
const (
	minWAFRateLimit = 10
	maxWAFRateLimit = 2_000_000_000
)

// wafBlockedBody is what a client over the rate gets: OpenAI's error shape
// (docs/api.md "Errors"), as API Gateway's own 429 is.
const wafBlockedBody = `{"error":{"message":"too many requests from this address: slow down","type":"rate_limit_error","param":null,"code":"rate_limit_exceeded"}}`

// newFirewall puts a regional web ACL on the API's stage with one
// rate-based rule, when props.WAFRateLimit is set (-c wafRateLimit=N): a
// client IP past N requests in 5 minutes is blocked with a 429 until its
// rate falls back. It is the per-client limit in front of the api
// function: the stage's throttle is shared by every client, and requests
// with garbage keys never reach the per-key limit (SECURITY.md "Limits and
// abuse"). Off by default: WAF is billed per web ACL and per request.
func newFirewall(scope constructs.Construct, props RelayProps, rest awsapigateway.RestApi) {
	if props.WAFRateLimit <= 0 {
		return
	}
	c := constructs.NewConstruct(scope, jsii.String("Firewall"))
	visibility := func(name string) *awswafv2.CfnWebACL_VisibilityConfigProperty {
		return &awswafv2.CfnWebACL_VisibilityConfigProperty{
			CloudWatchMetricsEnabled: jsii.Bool(true),
			MetricName:               jsii.String(props.Prefix + "-" + name),
			SampledRequestsEnabled:   jsii.Bool(true),
		}
	}
	acl := awswafv2.NewCfnWebACL(c, jsii.String("WebAcl"), &awswafv2.CfnWebACLProps{
		Name:             jsii.String(props.Prefix + "-api"),
		Scope:            jsii.String("REGIONAL"),
		DefaultAction:    &awswafv2.CfnWebACL_DefaultActionProperty{Allow: &awswafv2.CfnWebACL_AllowActionProperty{}},
		VisibilityConfig: visibility("api"),
		CustomResponseBodies: &map[string]*awswafv2.CfnWebACL_CustomResponseBodyProperty{
			"rateLimited": {ContentType: jsii.String("APPLICATION_JSON"), Content: jsii.String(wafBlockedBody)},
		},
		Rules: &[]*awswafv2.CfnWebACL_RuleProperty{{
			Name:     jsii.String("per-client-rate"),
			Priority: jsii.Number(0),
			Statement: &awswafv2.CfnWebACL_StatementProperty{
				RateBasedStatement: &awswafv2.CfnWebACL_RateBasedStatementProperty{
					AggregateKeyType:    jsii.String("IP"),
					Limit:               jsii.Number(props.WAFRateLimit),
					EvaluationWindowSec: jsii.Number(300),
				},
			},
			Action: &awswafv2.CfnWebACL_RuleActionProperty{Block: &awswafv2.CfnWebACL_BlockActionProperty{
				CustomResponse: &awswafv2.CfnWebACL_CustomResponseProperty{
					ResponseCode:          jsii.Number(429),
					CustomResponseBodyKey: jsii.String("rateLimited"),
				},
			}},
			VisibilityConfig: visibility("per-client-rate"),
		}},
	})
	awswafv2.NewCfnWebACLAssociation(c, jsii.String("WebAclAssociation"), &awswafv2.CfnWebACLAssociationProps{
		ResourceArn: rest.DeploymentStage().StageArn(),
		WebAclArn:   acl.AttrArn(),
	})
}
