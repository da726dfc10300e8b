// Command infra is the CDK app that deploys the service: one stack made of
// one construct per component (storage, secrets, pipeline, schedules, api,
// observability), all built from internal/resources, the definitions the
// local runtime uses too. `cdk synth` (make synth) runs it offline.
package main

import (
	"fmt"
	"os"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"
)

func main() {
	err := run()
	jsii.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "infra:", err)
		os.Exit(1)
	}
}

func run() error {
	outdir := os.Getenv("CDK_OUTDIR") // set by the cdk CLI
	if outdir == "" {
		outdir = "cdk.out"
	}
	ctx, err := cdkContext("cdk.json")
	if err != nil {
		return err
	}
	app := awscdk.NewApp(&awscdk.AppProps{Outdir: jsii.String(outdir), Context: &ctx})
	props, err := propsFromContext(app.Node())
	if err != nil {
		return err
	}
	bundles, err := os.MkdirTemp("", "relay-bundles-")
	if err != nil {
		return err
	}
	// Assets are copied into the cloud assembly when the functions are
	// created, so the staging directory is not needed after synth.
	defer os.RemoveAll(bundles)
	if err := stageBundles(bundles, props.BuildDir, props.ModelsPath, props.Set().Functions); err != nil {
		return err
	}
	props.BundleDir = bundles
	NewRelayStack(app, props)
	app.Synth(nil)
	return nil
}
