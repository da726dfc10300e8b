package main

import (
	"strings"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigateway"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/relaybatch/relay/internal/apigw"
	"github.com/relaybatch/relay/internal/resources"
)

// API is the REST API in front of the api function. REST rather than HTTP
// API because only REST APIs stream Lambda responses (docs/design.md "Shape").
type API struct {
	Scope    constructs.Construct
	RestAPI  awsapigateway.RestApi
	Function *function
}

// corsHeaders are what the panel sends: both SDKs' auth headers, and the
// Anthropic version and idempotency headers.
var corsHeaders = []string{"Authorization", "x-api-key", "Content-Type", "Idempotency-Key", "anthropic-version"}

// binaryMediaTypes makes every request body reach the function base64-
// encoded (apigw.Request decodes it) whatever its Content-Type, multipart
// uploads included, and lets a base64 response body be decoded whatever the
// client's Accept header. The 4 MiB request limit (docs/api.md "Limits") already allows for
// the encoding.
var binaryMediaTypes = []string{"*/*"}

func NewAPI(scope constructs.Construct, props RelayProps, storage *Storage, pipeline *Pipeline, schedules *Schedules, env map[string]*string) *API {
	c := constructs.NewConstruct(scope, jsii.String("Api"))
	set := props.Set()

	fn := newFunction(c, props, set.Function("api"), env)
	storage.GrantTable(fn.Role)
	storage.GrantBucket(fn.Role)
	// A cancelled template ends in the api function: its webhook too.
	pipeline.GrantSend(fn.Role, resources.Dispatch, resources.Webhook)
	schedules.GrantManage(fn.Role)

	accessLogs := awslogs.NewLogGroup(c, jsii.String("AccessLogs"), &awslogs.LogGroupProps{
		Retention:     awslogs.RetentionDays_THREE_MONTHS,
		RemovalPolicy: props.RemovalPolicy(),
	})
	rest := awsapigateway.NewRestApi(c, jsii.String("RestApi"), &awsapigateway.RestApiProps{
		RestApiName:      jsii.String(props.Prefix),
		Description:      jsii.String("Relay Batch: OpenAI and Anthropic compatible batch API"),
		EndpointTypes:    &[]awsapigateway.EndpointType{awsapigateway.EndpointType_REGIONAL},
		BinaryMediaTypes: jsii.Strings(binaryMediaTypes...),
		CloudWatchRole:   jsii.Bool(props.APIGatewayAccountRole),
		DeployOptions: &awsapigateway.StageOptions{
			StageName:            jsii.String(props.StageName),
			ThrottlingRateLimit:  jsii.Number(props.ThrottleRate),
			ThrottlingBurstLimit: jsii.Number(props.ThrottleBurst),
			MetricsEnabled:       jsii.Bool(true),
			LoggingLevel:         awsapigateway.MethodLoggingLevel_ERROR,
			AccessLogDestination: awsapigateway.NewLogGroupLogDestination(accessLogs),
			AccessLogFormat: awsapigateway.AccessLogFormat_JsonWithStandardFields(&awsapigateway.JsonWithStandardFieldProps{
				Caller: jsii.Bool(false), User: jsii.Bool(false),
				HttpMethod: jsii.Bool(true), Ip: jsii.Bool(true), Protocol: jsii.Bool(true),
				RequestTime: jsii.Bool(true), ResourcePath: jsii.Bool(true),
				ResponseLength: jsii.Bool(true), Status: jsii.Bool(true),
			}),
		},
		DefaultCorsPreflightOptions: &awsapigateway.CorsOptions{
			AllowOrigins: jsii.Strings(props.CORSOrigins...),
			AllowHeaders: jsii.Strings(corsHeaders...),
			AllowMethods: awsapigateway.Cors_ALL_METHODS(),
			MaxAge:       awscdk.Duration_Hours(jsii.Number(1)),
		},
	})

	integration := func(mode awsapigateway.ResponseTransferMode, timeout time.Duration) awsapigateway.LambdaIntegration {
		return awsapigateway.NewLambdaIntegration(fn.Fn, &awsapigateway.LambdaIntegrationOptions{
			Proxy:                jsii.Bool(true),
			ResponseTransferMode: mode,
			Timeout:              awscdk.Duration_Millis(jsii.Number(float64(timeout.Milliseconds()))),
			// One permission for the whole API instead of two per method: a
			// function's resource policy is limited to 20 KB.
			ScopePermissionToMethod: jsii.Bool(false),
		})
	}
	routeTree(rest.Root(), apigw.StreamedRoutes,
		integration(awsapigateway.ResponseTransferMode_BUFFERED, resources.MaxBufferedTimeout),
		integration(awsapigateway.ResponseTransferMode_STREAM, resources.StreamTimeout(fn.Def.Timeout)))

	// With binary media type */*, a MOCK integration (the CORS preflight)
	// gets a binary request it cannot template and answers 500, unless it
	// converts the request to text.
	for _, m := range *rest.Methods() {
		if *m.HttpMethod() == "OPTIONS" {
			cfn := m.Node().DefaultChild().(awsapigateway.CfnMethod)
			cfn.AddPropertyOverride(jsii.String("Integration.ContentHandling"), jsii.String("CONVERT_TO_TEXT"))
		}
	}

	gatewayErrors(rest, props.CORSOrigins)
	newFirewall(c, props, rest)

	awscdk.NewCfnOutput(scope, jsii.String("BaseUrl"), &awscdk.CfnOutputProps{
		Description: jsii.String("OpenAI base_url (the Anthropic SDK takes it without /v1)"),
		Value:       jsii.String(*rest.Url() + "v1"),
	})
	awscdk.NewCfnOutput(scope, jsii.String("PanelUrl"), &awscdk.CfnOutputProps{
		Description: jsii.String("the web panel: sign in with a key from relay keys create"),
		Value:       rest.Url(),
	})
	return &API{Scope: c, RestAPI: rest, Function: fn}
}

// routeTree routes every request to the api function: ANY on / and
// /{proxy+}, and STREAM integrations on the streamed routes. Rather than
// count on API Gateway falling back from a deeper resource to a shallower
// greedy one, each resource a streamed route creates gets ANY and, unless it
// has a path variable child already (a resource may have only one), a
// {proxy+} child: every path has a deepest match that is a method.
func routeTree(root awsapigateway.IResource, streamed []string, buffered, streaming awsapigateway.Integration) {
	type node struct {
		res      awsapigateway.IResource
		stream   bool
		varChild bool
	}
	nodes := map[string]*node{"": {res: root}}
	order := []string{""}
	for _, route := range streamed {
		path := ""
		for _, seg := range strings.Split(strings.Trim(route, "/"), "/") {
			parent := nodes[path]
			path += "/" + seg
			if nodes[path] == nil {
				nodes[path] = &node{res: parent.res.AddResource(jsii.String(seg), nil)}
				order = append(order, path)
				if strings.HasPrefix(seg, "{") {
					parent.varChild = true
				}
			}
		}
		nodes[path].stream = true
	}
	for _, path := range order {
		n := nodes[path]
		integration := buffered
		if n.stream {
			integration = streaming
		}
		n.res.AddMethod(jsii.String("ANY"), integration, nil)
		if !n.varChild {
			n.res.AddResource(jsii.String("{proxy+}"), nil).AddMethod(jsii.String("ANY"), buffered, nil)
		}
	}
}

// gatewayErrors gives API Gateway's own errors (throttling, 413, a timeout)
// OpenAI's error body, which both SDKs parse, and the CORS header, without
// which the panel sees a network error instead of the status.
func gatewayErrors(rest awsapigateway.RestApi, origins []string) {
	var headers *map[string]*string
	if len(origins) == 1 {
		headers = &map[string]*string{"Access-Control-Allow-Origin": jsii.String("'" + origins[0] + "'")}
	}
	body := func(typ string) *map[string]*string {
		return &map[string]*string{"application/json": jsii.String(
			`{"error":{"message":$context.error.messageString,"type":"` + typ + `","param":null,"code":null}}`)}
	}
	rest.AddGatewayResponse(jsii.String("Default4xx"), &awsapigateway.GatewayResponseOptions{
		Type: awsapigateway.ResponseType_DEFAULT_4XX(), ResponseHeaders: headers, Templates: body("invalid_request_error"),
	})
	rest.AddGatewayResponse(jsii.String("Default5xx"), &awsapigateway.GatewayResponseOptions{
		Type: awsapigateway.ResponseType_DEFAULT_5XX(), ResponseHeaders: headers, Templates: body("server_error"),
	})
}
