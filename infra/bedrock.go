package main

import (
	"slices"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/jsii-runtime-go"

	"github.com/relaybatch/relay/internal/config"
)

// GrantBedrock lets role call exactly the Bedrock models of the models
// file, with bedrock:InvokeModel on each one's ARNs (config.Model.BedrockARNs:
// the foundation model in its region, or an inference profile and the
// foundation model in each region it routes to). Without Bedrock models it
// grants nothing.
func GrantBedrock(role awsiam.IRole, models *config.Models) {
	stack := awscdk.Stack_Of(role)
	var arns []string
	for _, m := range models.Models {
		for _, arn := range m.BedrockARNs(*stack.Partition(), *stack.Account()) {
			if !slices.Contains(arns, arn) {
				arns = append(arns, arn)
			}
		}
	}
	if len(arns) == 0 {
		return
	}
	role.AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions:   jsii.Strings("bedrock:InvokeModel"),
		Resources: jsii.Strings(arns...),
	}))
}
