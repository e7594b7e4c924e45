// Command cert-manager runs cert-manager's controllers and its CA injector in one process, built
// from the cert-manager Go module for edgegate's system tests (tests/cert-manager/build.sh).
//
// cert-manager's own binaries live in cmd/ modules that the Go module proxy does not serve, and
// the defaults they set are internal, so this main wires up the exported pieces itself:
// pkg/controller's ContextFactory and registered constructors (controller.Known()) for the
// controllers below, and pkg/controller/cainjector's RegisterAllInjectors on a controller-runtime
// manager for the CA injector.
//
// NOT running here: cert-manager's admission webhook (its code is internal to the module). So
// Certificates, Issuers and CertificateRequests get no defaulting and no validation beyond the
// CRDs' schemas: write complete, valid objects. Also absent: ACME, Vault and Venafi issuers, the
// ingress/gateway shims, metrics, healthz and leader election.
//
//	cert-manager --kubeconfig FILE [--namespace NS] [--controllers a,b,...] [--v N]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apiext "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	kscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	apireg "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	cmscheme "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/scheme"
	"github.com/cert-manager/cert-manager/pkg/controller"
	"github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	"github.com/cert-manager/cert-manager/pkg/util"

	// Each controller registers its constructor with controller.Known() in init().
	crapprover "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	crca "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	crselfsigned "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	"github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	"github.com/cert-manager/cert-manager/pkg/controller/issuers"

	// The issuers and clusterissuers controllers check an issuer's setup through the issuer
	// implementations, which register themselves with pkg/issuer in init().
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

// The controllers this binary runs unless --controllers says otherwise.
var defaultControllers = []string{
	issuers.ControllerName,
	clusterissuers.ControllerName,
	trigger.ControllerName,
	issuing.ControllerName,
	keymanager.ControllerName,
	requestmanager.ControllerName,
	readiness.ControllerName,
	revisionmanager.ControllerName,
	crca.CRControllerName,
	crselfsigned.CRControllerName,
	crapprover.ControllerName,
}

func main() {
	// A flag set of our own: controller-runtime registers --kubeconfig on flag.CommandLine.
	flags := flag.NewFlagSet("cert-manager", flag.ExitOnError)
	kubeconfig := flags.String("kubeconfig", "", "kubeconfig of the cluster to manage (required)")
	namespace := flags.String("namespace", "kube-system",
		"cluster resource namespace: where ClusterIssuers' Secrets (e.g. a CA issuer's key pair) live")
	controllers := flags.String("controllers", strings.Join(defaultControllers, ","),
		"comma-separated controllers to run; known: "+strings.Join(knownControllers(), ","))
	workers := flags.Int("workers", 5, "workers per controller")
	klog.InitFlags(flags) // --v and friends
	_ = flags.Parse(os.Args[1:])
	if *kubeconfig == "" {
		fmt.Fprintln(os.Stderr, "cert-manager: --kubeconfig is required")
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	logger := klog.NewKlogr().WithName("cert-manager")
	ctrl.SetLogger(logger)
	ctx = logf.NewContext(ctx, logger)

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		return runControllers(gctx, *kubeconfig, *namespace, strings.Split(*controllers, ","), *workers)
	})
	g.Go(func() error { return runCAInjector(gctx, *kubeconfig) })
	if err := g.Wait(); err != nil && ctx.Err() == nil {
		logger.Error(err, "exiting")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}

func knownControllers() []string {
	var names []string
	for name := range controller.Known() {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// runControllers mirrors cert-manager's cmd/controller/app.Run without leader election, metrics
// or healthz, and with the option defaults of internal/apis/config/controller/v1alpha1 written
// out here.
func runControllers(ctx context.Context, kubeconfig, clusterResourceNamespace string, enabled []string, workers int) error {
	log := logf.FromContext(ctx, "controller")
	factory, err := controller.NewContextFactory(ctx, controller.ContextOptions{
		Kubeconfig:         kubeconfig,
		KubernetesAPIQPS:   20,
		KubernetesAPIBurst: 50,
		Namespace:          "", // watch every namespace
		IssuerOptions: controller.IssuerOptions{
			ClusterResourceNamespace:        clusterResourceNamespace,
			ClusterIssuerAmbientCredentials: true,
			IssuerAmbientCredentials:        false,
		},
		ACMEOptions: controller.ACMEOptions{ // unused (no ACME controllers), but kept valid
			HTTP01SolverImage:                 "quay.io/jetstack/cert-manager-acmesolver:" + util.AppVersion,
			HTTP01SolverResourceRequestCPU:    resource.MustParse("10m"),
			HTTP01SolverResourceRequestMemory: resource.MustParse("64Mi"),
			HTTP01SolverResourceLimitsCPU:     resource.MustParse("100m"),
			HTTP01SolverResourceLimitsMemory:  resource.MustParse("64Mi"),
			ACMEHTTP01SolverRunAsNonRoot:      true,
			DNS01CheckAuthoritative:           true,
			DNS01CheckRetryPeriod:             10 * time.Second,
		},
		IngressShimOptions: controller.IngressShimOptions{
			DefaultIssuerKind:                 "Issuer",
			DefaultIssuerGroup:                "cert-manager.io",
			DefaultAutoCertificateAnnotations: []string{"kubernetes.io/tls-acme"},
		},
		CertificateOptions: controller.CertificateOptions{
			EnableOwnerRef:                           false,
			CopiedAnnotationPrefixes:                 []string{"*", "-kubectl.kubernetes.io/", "-fluxcd.io/", "-argocd.argoproj.io/"},
			CertificateRequestMinimumBackoffDuration: time.Hour,
			CertificateRequestMaximumBackoffDuration: 32 * time.Hour,
		},
		SchedulerOptions: controller.SchedulerOptions{MaxConcurrentChallenges: 60},
	})
	if err != nil {
		return fmt.Errorf("building the controller context: %w", err)
	}
	base, err := factory.Build()
	if err != nil {
		return err
	}

	known := controller.Known()
	g, gctx := errgroup.WithContext(ctx)
	for _, name := range enabled {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		construct, ok := known[name]
		if !ok {
			return fmt.Errorf("unknown controller %q (known: %s)", name, strings.Join(knownControllers(), ","))
		}
		c, err := construct(factory)
		if err != nil {
			return fmt.Errorf("constructing controller %s: %w", name, err)
		}
		log.Info("starting controller", "controller", name)
		g.Go(func() error { return c.Run(workers, gctx) })
	}
	// Informers the constructors asked for start only now.
	base.SharedInformerFactory.Start(gctx.Done())
	base.KubeSharedInformerFactory.Start(gctx.Done())
	base.HTTP01ResourceMetadataInformersFactory.Start(gctx.Done())
	g.Go(func() error {
		base.SharedInformerFactory.WaitForCacheSync(gctx.Done())
		base.KubeSharedInformerFactory.WaitForCacheSync(gctx.Done())
		if gctx.Err() == nil {
			// tests/system/src/cert_manager.rs waits for this line.
			log.Info("controllers' caches synced")
		}
		return nil
	})
	err = g.Wait()
	base.HTTP01ResourceMetadataInformersFactory.Shutdown()
	base.KubeSharedInformerFactory.Shutdown()
	base.SharedInformerFactory.Shutdown()
	return err
}

// runCAInjector mirrors cert-manager's cmd/cainjector/app.Run: CA bundles injected into
// Validating- and MutatingWebhookConfigurations, from a Certificate's Secret
// (cert-manager.io/inject-ca-from: NS/CERT) or from a Secret directly
// (cert-manager.io/inject-ca-from-secret: NS/SECRET, which the Secret must allow with the annotation
// cert-manager.io/allow-direct-injection: "true").
func runCAInjector(ctx context.Context, kubeconfig string) error {
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("loading %s: %w", kubeconfig, err)
	}
	config = util.RestConfigWithUserAgent(config, "cainjector")
	scheme := runtime.NewScheme()
	utilruntime.Must(kscheme.AddToScheme(scheme))
	utilruntime.Must(cmscheme.AddToScheme(scheme))
	utilruntime.Must(apiext.AddToScheme(scheme))
	utilruntime.Must(apireg.AddToScheme(scheme))
	mgr, err := ctrl.NewManager(config, ctrl.Options{
		Scheme: scheme,
		Cache:  cache.Options{ReaderFailOnMissingInformer: true},
		// As upstream: Secrets are read directly, never cached whole.
		Client:                 client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
		LeaderElection:         false,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		return fmt.Errorf("creating the cainjector manager: %w", err)
	}
	err = cainjector.RegisterAllInjectors(ctx, mgr, cainjector.SetupOptions{
		EnableCertificatesDataSource: true,
		EnabledReconcilersFor: map[string]bool{
			cainjector.MutatingWebhookConfigurationName:   true,
			cainjector.ValidatingWebhookConfigurationName: true,
			cainjector.APIServiceName:                     false,
			cainjector.CustomResourceDefinitionName:       false,
		},
	})
	if err != nil {
		return fmt.Errorf("registering the CA injectors: %w", err)
	}
	logf.FromContext(ctx, "cainjector").Info("starting the CA injector")
	return mgr.Start(ctx)
}
